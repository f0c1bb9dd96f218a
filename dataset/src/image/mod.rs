//! Built-in image maps for the standard input pipeline: decode (`decode_png`,
//! `decode_jpeg`), crop and resize (`center_crop`, `resize`, `random_resized_crop`),
//! `random_flip`, and `normalize` to float32. Each takes the name of the component
//! to work on as its first argument and replaces that component, keeping the others
//! and the names, so they compose after `parse_example`.
//!
//! Images are `uint8 [height, width, channels]` (channels 1 gray, 2 gray+alpha,
//! 3 RGB, 4 RGBA; every channel is treated alike, alpha too) until `normalize` makes
//! them `float32`, `[H, W, C]` or `[C, H, W]`.
//!
//! # Layout
//! - `png`, `jpeg` — the decoders, each bounding the image from its header by
//!   [`MAX_IMAGE_BYTES`] before any pixel buffer is allocated.
//! - `geometry` — `center_crop`, `resize`, `random_resized_crop`, `random_flip`
//!   (resizing through `fast_image_resize`, SIMD).
//! - `normalize` — uint8 → float32 with per-channel mean and std, HWC or CHW.
//! - `seeded` — the random stream of one element of a seeded op, from the op's seed
//!   and the element's `ElementKey`, so that a replayed element draws the same numbers.
//! - this file — registration and argument checks.

mod geometry;
mod jpeg;
mod normalize;
mod png;
mod seeded;

pub(crate) use geometry::center_crop;
pub(crate) use jpeg::decode_jpeg;
pub(crate) use normalize::{normalize, Normalization};
pub(crate) use png::decode_png;

use bytes::Bytes;

use crate::def::{Arg, FnKind::Map};
use crate::registry::FunctionRegistry;
use crate::tensor::{DType, Element, Tensor};
use geometry::Filter;

/// The largest image a built-in map makes or decodes: 256 MiB of `uint8` pixels
/// (e.g. 8192 × 8192 RGBA). Image headers declare any size (a PNG up to 2^31 − 1
/// on each side); decoders check it against this before allocating pixels, and
/// `resize` / `random_resized_crop` check their output size against it.
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;

pub(crate) fn register(r: &mut FunctionRegistry) {
    r.register_map("decode_png", 1, |e, args| on_component(e, args, decode_png));
    r.set_arg_check(Map, "decode_png", check_name);
    r.set_fails_per_element("decode_png");
    r.register_keyed_map("decode_jpeg", 1..=2, |e, args, _| {
        let channels = jpeg_channels(args)?;
        on_component(e, args, |t| decode_jpeg(t, channels))
    });
    r.set_arg_check(Map, "decode_jpeg", check_decode_jpeg);
    r.set_fails_per_element("decode_jpeg");
    r.register_map("center_crop", 3, |e, args| {
        let (h, w) = (size_arg(args, 1)?, size_arg(args, 2)?);
        on_component(e, args, |t| center_crop(t, h, w))
    });
    r.set_arg_check(Map, "center_crop", check_crop);
    r.register_keyed_map("resize", 3..=4, |e, args, _| {
        let (h, w, filter) = (size_arg(args, 1)?, size_arg(args, 2)?, filter_arg(args, 3)?);
        on_component(e, args, |t| geometry::resize(t, h, w, filter))
    });
    r.set_arg_check(Map, "resize", check_resize);
    r.register_keyed_map("random_resized_crop", 4..=8, |e, args, key| {
        let crop = geometry::RandomResizedCrop::from_args(args)?;
        on_component(e, args, |t| crop.apply(t, key))
    });
    r.set_arg_check(Map, "random_resized_crop", |args| {
        geometry::RandomResizedCrop::from_args(args).map(|_| ())
    });
    r.register_keyed_map("random_flip", 2..=2, |e, args, key| {
        let seed = seed_arg(args, 1)?;
        on_component(e, args, |t| geometry::random_flip(t, seed, key))
    });
    r.set_arg_check(Map, "random_flip", |args| check_name(args).and(seed_arg(args, 1).map(|_| ())));
    r.register_keyed_map("normalize", 1..=Normalization::MAX_ARGS, |e, args, _| {
        let how = Normalization::from_args(args)?;
        on_component(e, args, |t| normalize(t, &how))
    });
    r.set_arg_check(Map, "normalize", |args| Normalization::from_args(args).map(|_| ()));
}

fn check_name(args: &[Arg]) -> Result<(), String> {
    match args.first() {
        Some(Arg::Str(_)) => Ok(()),
        other => Err(format!("argument 0 must be a component name (a string), got {other:?}")),
    }
}

fn check_crop(args: &[Arg]) -> Result<(), String> {
    check_name(args)?;
    size_arg(args, 1)?;
    size_arg(args, 2).map(|_| ())
}

fn check_resize(args: &[Arg]) -> Result<(), String> {
    check_name(args)?;
    check_output_size(size_arg(args, 1)?, size_arg(args, 2)?, 1)?;
    filter_arg(args, 3).map(|_| ())
}

fn check_decode_jpeg(args: &[Arg]) -> Result<(), String> {
    check_name(args)?;
    jpeg_channels(args).map(|_| ())
}

/// `decode_jpeg`'s optional argument 1: the channels to decode to (1 or 3);
/// `None` keeps the file's (1 for a grayscale JPEG, else 3).
fn jpeg_channels(args: &[Arg]) -> Result<Option<u8>, String> {
    match args.get(1) {
        None => Ok(None),
        Some(Arg::Int(c @ (1 | 3))) => Ok(Some(*c as u8)),
        Some(other) => {
            Err(format!("argument 1 (channels) must be 1 (grayscale) or 3 (RGB), got {other:?}"))
        }
    }
}

/// A positive integer argument (a height or width).
fn size_arg(args: &[Arg], i: usize) -> Result<u64, String> {
    match args.get(i) {
        Some(Arg::Int(v)) if *v > 0 => Ok(*v as u64),
        other => Err(format!("argument {i} must be a positive integer size, got {other:?}")),
    }
}

/// A seed: any integer, taken as its 64 bits.
fn seed_arg(args: &[Arg], i: usize) -> Result<u64, String> {
    match args.get(i) {
        Some(Arg::Int(v)) => Ok(*v as u64),
        other => Err(format!("argument {i} must be an integer seed, got {other:?}")),
    }
}

/// An optional resampling filter name at `i` (default bilinear).
fn filter_arg(args: &[Arg], i: usize) -> Result<Filter, String> {
    match args.get(i) {
        None => Ok(Filter::Bilinear),
        Some(Arg::Str(name)) => Filter::from_name(name),
        Some(other) => {
            Err(format!("argument {i} must be a filter name ({}), got {other:?}", Filter::NAMES))
        }
    }
}

/// Refuses an output image of `h × w × channels` bytes over [`MAX_IMAGE_BYTES`].
fn check_output_size(h: u64, w: u64, channels: u64) -> Result<(), String> {
    match h.checked_mul(w).and_then(|n| n.checked_mul(channels)) {
        Some(b) if b <= MAX_IMAGE_BYTES => Ok(()),
        _ => Err(format!(
            "a {h}x{w} output of {channels} channel(s) is over the limit of {MAX_IMAGE_BYTES} \
             bytes (MAX_IMAGE_BYTES); ask for a smaller size"
        )),
    }
}

/// The bytes of a bytes (or string) scalar: an encoded image (`what`).
fn bytes_scalar(t: &Tensor, what: &str) -> Result<Bytes, String> {
    if !t.shape().is_empty() || !matches!(t.dtype(), DType::Bytes | DType::String) {
        return Err(format!(
            "expected a bytes scalar ({what}), got {} {:?}",
            t.dtype().name(),
            t.shape()
        ));
    }
    let items = t.items().map_err(|e| e.to_string())?;
    items.into_iter().next().ok_or_else(|| "empty scalar".into())
}

/// `(height, width, channels)` of a `uint8 [H, W, C]` image.
fn image_shape(t: &Tensor) -> Result<(u64, u64, u64), String> {
    let &[height, width, c] = t.shape() else {
        return Err(format!(
            "expected a [height, width, channels] image, got shape {:?}",
            t.shape()
        ));
    };
    if t.dtype() != DType::Uint8 {
        return Err(format!("expected uint8 pixels, got {}", t.dtype().name()));
    }
    Ok((height, width, c))
}

/// Applies `f` to the component named by argument 0.
fn on_component(
    mut e: Element,
    args: &[Arg],
    f: impl FnOnce(&Tensor) -> Result<Tensor, String>,
) -> Result<Element, String> {
    let Some(Arg::Str(name)) = args.first() else {
        return Err("argument 0 must be a component name".into());
    };
    let Some(i) = e.index_of(name) else {
        let names = e.names.as_deref().map(|n| n.join(", ")).unwrap_or_else(|| "none".into());
        return Err(format!("no component named `{name}` (the element's names: {names})"));
    };
    let out = f(&e.components[i]).map_err(|m| format!("component `{name}`: {m}"))?;
    e.components[i] = out;
    Ok(e)
}
