//! The requests the worker sends and the answers it reads, in the frame format of
//! [`crate::frame`]. Answers are decoded into the dataset crate's types; every
//! tensor goes through [`Tensor::new`], which checks its shape against its payload.

use std::sync::Arc;

use bytes::Bytes;
use sluice_dataset::{DType, Element, PyFailure, PyFunction, PyOp, PyOutcome, Tensor};

use crate::frame::{
    Cursor, FrameBuilder, FrameError, CALL, ECHO, ECHOED, HELLO, LOAD, LOADED, RESULT, UNLOAD,
};

/// The runner's first frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// `platform.python_version()`.
    pub python: String,
    /// numpy's version, empty when numpy does not import.
    pub numpy: String,
    /// Why numpy does not import.
    pub numpy_error: String,
    /// cloudpickle's version, empty when it does not import.
    pub cloudpickle: String,
}

/// An answer from the runner.
#[derive(Debug)]
pub(crate) enum Answer {
    Hello(Hello),
    Loaded { key: u64, result: Result<(), PyFailure> },
    Result { first: u32, outcomes: Vec<PyOutcome> },
    Echoed(Bytes),
}

pub(crate) fn load(
    key: u64,
    function: &PyFunction,
    made_with: &str,
) -> Result<FrameBuilder, String> {
    let mut f = FrameBuilder::new(LOAD);
    f.u64(key);
    match function {
        PyFunction::Ref(r) => {
            f.u8(0);
            f.blob(made_with.as_bytes())?;
            f.blob(r.as_bytes())?;
            f.blob(r.as_bytes())?;
        }
        PyFunction::Pickle(p) => {
            f.u8(1);
            f.blob(made_with.as_bytes())?;
            f.blob(p.name.as_bytes())?;
            f.blob(&p.data)?;
        }
    }
    Ok(f)
}

fn op_code(op: PyOp) -> u8 {
    match op {
        PyOp::Map => 0,
        PyOp::Filter => 1,
        PyOp::FlatMap => 2,
        PyOp::MapBatches => 3,
    }
}

pub(crate) fn call(key: u64, op: PyOp, inputs: &[Element]) -> Result<FrameBuilder, String> {
    let mut f = FrameBuilder::new(CALL);
    f.u64(key);
    f.u8(op_code(op));
    f.u32(u32::try_from(inputs.len()).map_err(|_| "too many inputs for one call".to_string())?);
    for e in inputs {
        element(&mut f, e)?;
    }
    if f.len() > crate::frame::MAX_FRAME {
        return Err(format!(
            "a call of {} bytes exceeds the {} MiB frame limit; make the batch_size smaller",
            f.len(),
            crate::frame::MAX_FRAME >> 20
        ));
    }
    Ok(f)
}

pub(crate) fn unload(key: u64) -> FrameBuilder {
    let mut f = FrameBuilder::new(UNLOAD);
    f.u64(key);
    f
}

pub(crate) fn echo(payload: &Bytes) -> FrameBuilder {
    let mut f = FrameBuilder::new(ECHO);
    f.aligned_payload(payload);
    f
}

fn dtype_code(d: DType) -> u8 {
    match d {
        DType::Int64 => 0,
        DType::Float32 => 1,
        DType::Float64 => 2,
        DType::String => 3,
        DType::Bytes => 4,
        DType::Bool => 5,
        DType::Uint8 => 6,
        DType::Int32 => 7,
    }
}

fn dtype_of(code: u8) -> Result<DType, FrameError> {
    Ok(match code {
        0 => DType::Int64,
        1 => DType::Float32,
        2 => DType::Float64,
        3 => DType::String,
        4 => DType::Bytes,
        5 => DType::Bool,
        6 => DType::Uint8,
        7 => DType::Int32,
        c => return Err(FrameError::Malformed(format!("unknown dtype code {c}"))),
    })
}

fn element(f: &mut FrameBuilder, e: &Element) -> Result<(), String> {
    let n = u32::try_from(e.components.len()).map_err(|_| "too many components".to_string())?;
    f.u32(n);
    match &e.names {
        Some(names) => {
            f.u8(1);
            for name in names.iter() {
                f.blob(name.as_bytes())?;
            }
        }
        None => f.u8(0),
    }
    for t in &e.components {
        f.u8(dtype_code(t.dtype()));
        f.u8(u8::try_from(t.shape().len()).map_err(|_| "more than 255 dimensions".to_string())?);
        for d in t.shape() {
            f.u64(*d);
        }
        f.u64(t.byte_len() as u64);
        f.aligned_payload(t.data());
    }
    Ok(())
}

/// Decodes elements, sharing one `Arc` of names between consecutive elements
/// with the same names.
#[derive(Default)]
struct ElementReader {
    last_names: Option<Arc<[String]>>,
}

impl ElementReader {
    fn element(&mut self, c: &mut Cursor) -> Result<Element, FrameError> {
        let n = c.u32("component count")? as usize;
        // Each component takes at least 10 bytes: a count beyond that is a lie.
        if n > c.remaining() / 10 + 1 {
            return Err(FrameError::Malformed(format!("{n} components in a short frame")));
        }
        let names = match c.u8("named flag")? {
            0 => None,
            1 => {
                let names: Vec<String> =
                    (0..n).map(|_| c.str("component name")).collect::<Result<_, _>>()?;
                match &self.last_names {
                    Some(last) if **last == names[..] => Some(last.clone()),
                    _ => {
                        let names: Arc<[String]> = names.into();
                        self.last_names = Some(names.clone());
                        Some(names)
                    }
                }
            }
            b => return Err(FrameError::Malformed(format!("named flag {b}"))),
        };
        let mut components = Vec::with_capacity(n);
        for _ in 0..n {
            let dtype = dtype_of(c.u8("dtype")?)?;
            let ndim = c.u8("ndim")? as usize;
            let shape = (0..ndim).map(|_| c.u64("dimension")).collect::<Result<Vec<_>, _>>()?;
            let nbytes = usize::try_from(c.u64("payload length")?)
                .map_err(|_| FrameError::Malformed("payload length overflows".into()))?;
            c.align()?;
            let data = c.take(nbytes, "payload")?;
            let t = Tensor::new(dtype, shape, data)
                .map_err(|e| FrameError::Malformed(format!("a tensor: {e}")))?;
            components.push(t);
        }
        Ok(Element { components, names, origin: None })
    }
}

fn failure(c: &mut Cursor) -> Result<PyFailure, FrameError> {
    Ok(PyFailure {
        error_type: c.str("failure type")?,
        message: c.str("failure message")?,
        traceback: c.str("traceback")?,
    })
}

/// Decodes one answer frame's body.
pub(crate) fn answer(body: Bytes) -> Result<Answer, FrameError> {
    let mut c = Cursor::new(body);
    let kind = c.u8("kind")?;
    let answer = match kind {
        HELLO => Answer::Hello(Hello {
            python: c.str("python version")?,
            numpy: c.str("numpy version")?,
            numpy_error: c.str("numpy error")?,
            cloudpickle: c.str("cloudpickle version")?,
        }),
        LOADED => {
            let key = c.u64("key")?;
            let result = match c.u8("ok")? {
                1 => Ok(()),
                0 => Err(failure(&mut c)?),
                b => return Err(FrameError::Malformed(format!("ok flag {b}"))),
            };
            Answer::Loaded { key, result }
        }
        RESULT => {
            let first = c.u32("first")?;
            let count = c.u32("count")? as usize;
            if count > c.remaining() {
                return Err(FrameError::Malformed(format!("{count} outcomes in a short frame")));
            }
            let mut reader = ElementReader::default();
            let mut outcomes = Vec::with_capacity(count);
            for _ in 0..count {
                outcomes.push(match c.u8("outcome tag")? {
                    0 => PyOutcome::Element(reader.element(&mut c)?),
                    1 => PyOutcome::Keep(c.u8("keep")? != 0),
                    2 => {
                        let m = c.u32("element count")? as usize;
                        if m > c.remaining() {
                            return Err(FrameError::Malformed(format!(
                                "{m} elements in a short frame"
                            )));
                        }
                        let v = (0..m).map(|_| reader.element(&mut c)).collect::<Result<_, _>>()?;
                        PyOutcome::Elements(v)
                    }
                    3 => PyOutcome::Failed(failure(&mut c)?),
                    t => return Err(FrameError::Malformed(format!("outcome tag {t}"))),
                });
            }
            Answer::Result { first, outcomes }
        }
        ECHOED => {
            c.align()?;
            let n = c.remaining();
            Answer::Echoed(c.take(n, "echo")?)
        }
        k => return Err(FrameError::Malformed(format!("unknown answer kind {k}"))),
    };
    if !c.at_end() {
        return Err(FrameError::Malformed(format!(
            "{} bytes after the answer at offset {}",
            c.remaining(),
            c.offset()
        )));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: &Element) -> Element {
        let mut f = FrameBuilder::new(RESULT);
        f.u32(0);
        f.u32(1);
        f.u8(0);
        element(&mut f, e).unwrap();
        let mut buf = Vec::new();
        f.write_to(&mut buf).unwrap();
        let body = crate::frame::read_frame(&mut &buf[..]).unwrap();
        match answer(body).unwrap() {
            Answer::Result { first: 0, mut outcomes } => match outcomes.pop() {
                Some(PyOutcome::Element(e)) => e,
                o => panic!("{o:?}"),
            },
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn elements_survive_the_frame_format() {
        let big = Tensor::from_u8s(vec![5000], vec![7u8; 5000]).unwrap();
        let e = Element::named(
            vec!["a".to_string(), "b".into(), "c".into()],
            vec![
                Tensor::scalar_bool(true),
                Tensor::from_items(DType::String, vec![2], &["x", "yz"]).unwrap(),
                big,
            ],
        )
        .unwrap();
        assert_eq!(round_trip(&e), e);
        let e = Element::new(vec![Tensor::scalar_i64(-3), Tensor::scalar_f32(1.5)]);
        assert_eq!(round_trip(&e), e);
        // int32 keeps its own dtype code (not int64's).
        let e = Element::new(vec![Tensor::from_i32s(vec![3], &[i32::MIN, 0, i32::MAX]).unwrap()]);
        assert_eq!(round_trip(&e), e);
    }

    #[test]
    fn lies_are_malformed_frames_not_allocations() {
        // A RESULT claiming 2^32-1 outcomes in a 10-byte body.
        let mut body = vec![RESULT];
        body.extend(0u32.to_le_bytes());
        body.extend(u32::MAX.to_le_bytes());
        body.push(0);
        assert!(matches!(answer(Bytes::from(body)), Err(FrameError::Malformed(_))));
        // A tensor whose payload does not match its shape.
        let mut f = FrameBuilder::new(RESULT);
        f.u32(0);
        f.u32(1);
        f.u8(0);
        f.u32(1);
        f.u8(0);
        f.u8(0); // int64
        f.u8(1);
        f.u64(3); // shape [3]: 24 bytes
        f.u64(8);
        f.aligned_payload(&Bytes::from(vec![0u8; 8]));
        let mut buf = Vec::new();
        f.write_to(&mut buf).unwrap();
        let body = crate::frame::read_frame(&mut &buf[..]).unwrap();
        let err = answer(body).unwrap_err().to_string();
        assert!(err.contains("needs 24 bytes"), "{err}");
        // A frame length above the limit is refused before allocating.
        let huge = ((crate::frame::MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(crate::frame::read_frame(&mut &huge[..]), Err(FrameError::Malformed(_))));
    }
}
