//! The built-in registry functions, small numeric helpers enough for examples, tests
//! and benchmarks. Real workloads register their own (see `registry`).
//!
//! Maps apply elementwise to every component of an element (int64, float32 and
//! float64 tensors of any shape); filters look at a one-component scalar. Errors are
//! plain strings: the executor wraps them into `DatasetError::Function` with the
//! function's name, so messages here do not repeat it.
//!
//! [`FunctionRegistry::builtin`] (and `Default`, which is it) is defined here, beside the
//! functions it registers, so that `registry` never calls back into its built-ins.

use crate::def::{Arg, FnKind};
use crate::registry::FunctionRegistry;
use crate::tensor::{DType, Element, Tensor};

impl FunctionRegistry {
    /// The built-in functions: maps `identity`, `square`, `negate`, `add`, `mul`,
    /// `to_string`, `decode_png`, `decode_jpeg`, `center_crop`, `resize`,
    /// `random_resized_crop`, `random_flip`, `normalize`; filters `mod_eq`, `lt`,
    /// `gt`, `eq`; dataset functions `tfrecord`, `tfrecord_skip_corrupt`,
    /// `text_lines`, `webdataset` (see `docs/dataset-spec.md`).
    pub fn builtin() -> Self {
        let mut r = Self::empty();
        register_all(&mut r);
        r
    }
}

impl Default for FunctionRegistry {
    fn default() -> Self {
        Self::builtin()
    }
}

pub(crate) fn register_all(r: &mut FunctionRegistry) {
    r.register_map("identity", 0, |e, _| Ok(e));
    r.register_map("square", 0, |e, _| {
        elementwise(e, |x| x.checked_mul(x).ok_or_else(|| overflow("square", x)), |x| x * x)
    });
    r.register_map("negate", 0, |e, _| {
        elementwise(e, |x| x.checked_neg().ok_or_else(|| overflow("negate", x)), |x| -x)
    });
    r.register_map("add", 1, |e, args| {
        binary(e, args, "add", |x, y| x.checked_add(y), |x, y| x + y)
    });
    r.register_map("mul", 1, |e, args| {
        binary(e, args, "mul", |x, y| x.checked_mul(y), |x, y| x * y)
    });
    r.register_map("to_string", 0, |e, _| map_components(e, to_string));

    r.register_filter("mod_eq", 2, mod_eq);
    r.set_arg_check(FnKind::Filter, "mod_eq", check_mod_eq);
    r.register_filter("lt", 1, |e, args| compare(e, args, |o| o.is_lt()));
    r.register_filter("gt", 1, |e, args| compare(e, args, |o| o.is_gt()));
    r.register_filter("eq", 1, |e, args| compare(e, args, |o| o.is_eq()));

    // Dataset functions for flat_map / interleave: the element names a file, read
    // under the registry's data roots (`FunctionRegistry::with_data_roots`).
    for name in ["tfrecord", "tfrecord_skip_corrupt", "text_lines", "webdataset"] {
        r.register_file_fn(name);
    }

    crate::image::register(r);
}

/// A numeric value: an int64, or any float widened to f64.
#[derive(Clone, Copy, Debug)]
enum Num {
    Int(i64),
    Float(f64),
}

fn overflow(op: &str, x: i64) -> String {
    format!("int64 overflow in {op} of {x}")
}

fn num_arg(args: &[Arg], i: usize) -> Result<Num, String> {
    match args.get(i) {
        Some(Arg::Int(v)) => Ok(Num::Int(*v)),
        Some(Arg::Float(v)) => Ok(Num::Float(*v)),
        Some(Arg::Str(s)) => Err(format!("argument {i} must be a number, got the string {s:?}")),
        None => Err(format!("missing argument {i}")),
    }
}

fn int_arg(args: &[Arg], i: usize) -> Result<i64, String> {
    match num_arg(args, i)? {
        Num::Int(v) => Ok(v),
        Num::Float(v) => Err(format!("argument {i} must be an integer, got {v}")),
    }
}

fn unsupported(t: &Tensor) -> String {
    format!("unsupported dtype {} (expected int64, float32 or float64)", t.dtype().name())
}

fn map_components(
    e: Element,
    f: impl Fn(&Tensor) -> Result<Tensor, String>,
) -> Result<Element, String> {
    let components = e.components.iter().map(f).collect::<Result<_, _>>()?;
    Ok(Element::new(components))
}

/// Applies `int` to int64 values and `float` to float values (float32 is computed in
/// f64 and rounded back, which gives the same result for one arithmetic operation).
fn elementwise(
    e: Element,
    int: impl Fn(i64) -> Result<i64, String>,
    float: impl Fn(f64) -> f64,
) -> Result<Element, String> {
    map_components(e, |t| {
        let shape = t.shape().to_vec();
        let out = match t.dtype() {
            DType::Int64 => {
                let v = t.i64_values().map_err(|e| e.to_string())?;
                let v = v.into_iter().map(&int).collect::<Result<Vec<_>, _>>()?;
                Tensor::from_i64s(shape, &v)
            }
            DType::Float32 => {
                let v = t.f32_values().map_err(|e| e.to_string())?;
                let v: Vec<f32> = v.into_iter().map(|x| float(f64::from(x)) as f32).collect();
                Tensor::from_f32s(shape, &v)
            }
            DType::Float64 => {
                let v = t.f64_values().map_err(|e| e.to_string())?;
                let v: Vec<f64> = v.into_iter().map(&float).collect();
                Tensor::from_f64s(shape, &v)
            }
            _ => return Err(unsupported(t)),
        };
        out.map_err(|e| e.to_string())
    })
}

/// `x op arg` for every value: an int64 tensor needs an integer argument (checked
/// arithmetic, overflow is an error); a float tensor takes either.
fn binary(
    e: Element,
    args: &[Arg],
    op: &str,
    int: impl Fn(i64, i64) -> Option<i64>,
    float: impl Fn(f64, f64) -> f64,
) -> Result<Element, String> {
    match num_arg(args, 0)? {
        Num::Int(y) => elementwise(
            e,
            |x| int(x, y).ok_or_else(|| format!("int64 overflow in {op} of {x} and {y}")),
            |x| float(x, y as f64),
        ),
        Num::Float(y) => elementwise(
            e,
            |_| {
                Err(format!(
                    "cannot {op} the float argument {y} to an int64 tensor; pass an integer"
                ))
            },
            |x| float(x, y),
        ),
    }
}

fn to_string(t: &Tensor) -> Result<Tensor, String> {
    let items: Vec<String> = match t.dtype() {
        DType::Int64 => {
            t.i64_values().map_err(|e| e.to_string())?.iter().map(i64::to_string).collect()
        }
        DType::Float32 => {
            t.f32_values().map_err(|e| e.to_string())?.iter().map(f32::to_string).collect()
        }
        DType::Float64 => {
            t.f64_values().map_err(|e| e.to_string())?.iter().map(f64::to_string).collect()
        }
        _ => return Err(unsupported(t)),
    };
    Tensor::from_items(DType::String, t.shape().to_vec(), &items).map_err(|e| e.to_string())
}

/// The value of a one-component scalar numeric element.
fn scalar(e: &Element) -> Result<Num, String> {
    let t = match e.components.as_slice() {
        [t] => t,
        many => {
            return Err(format!("needs a one-component element, got {} components", many.len()))
        }
    };
    if !t.shape().is_empty() {
        return Err(format!("needs a scalar, got shape {:?}", t.shape()));
    }
    let first = |v: Vec<f64>| v.first().copied().ok_or_else(|| "empty scalar".to_string());
    match t.dtype() {
        DType::Int64 => {
            let v = t.i64_values().map_err(|e| e.to_string())?;
            v.first().copied().map(Num::Int).ok_or_else(|| "empty scalar".to_string())
        }
        DType::Float32 => {
            let v = t.f32_values().map_err(|e| e.to_string())?;
            first(v.into_iter().map(f64::from).collect()).map(Num::Float)
        }
        DType::Float64 => first(t.f64_values().map_err(|e| e.to_string())?).map(Num::Float),
        _ => Err(unsupported(t)),
    }
}

/// Keeps `x` where `x.rem_euclid(m) == r` (int64 elements, integer arguments).
fn mod_eq(e: &Element, args: &[Arg]) -> Result<bool, String> {
    let (m, r) = (int_arg(args, 0)?, int_arg(args, 1)?);
    if m == 0 {
        return Err("modulus must not be 0".into());
    }
    match scalar(e)? {
        // i128 so that `i64::MIN mod -1` cannot overflow.
        Num::Int(x) => Ok(i128::from(x).rem_euclid(i128::from(m)) == i128::from(r)),
        Num::Float(x) => Err(format!("needs an int64 element, got the float {x}")),
    }
}

fn check_mod_eq(args: &[Arg]) -> Result<(), String> {
    match args.first() {
        Some(Arg::Int(0)) => Err("modulus (argument 0) must not be 0".into()),
        _ => Ok(()),
    }
}

/// Compares the element with argument 0: exactly for int64 against an integer,
/// in f64 otherwise (NaN compares false).
fn compare(
    e: &Element,
    args: &[Arg],
    keep: impl Fn(std::cmp::Ordering) -> bool,
) -> Result<bool, String> {
    let y = num_arg(args, 0)?;
    let ord = match (scalar(e)?, y) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (x, y) => as_f64(x).partial_cmp(&as_f64(y)),
    };
    Ok(ord.is_some_and(keep))
}

fn as_f64(n: Num) -> f64 {
    match n {
        Num::Int(v) => v as f64,
        Num::Float(v) => v,
    }
}
