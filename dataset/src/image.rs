//! Built-in image maps for the standard input pipeline (`decode_png` →
//! `center_crop` → `normalize`). Each takes the name of the component to work on
//! as its first argument and replaces that component, keeping the others and the
//! names, so they compose after `parse_example`.
//!
//! Images are `uint8 [height, width, channels]` (channels 1 gray, 2 gray+alpha,
//! 3 RGB, 4 RGBA) until `normalize` makes them `float32` in `[0, 1]`.

use crate::def::Arg;
use crate::registry::FunctionRegistry;
use crate::tensor::{DType, Element, Tensor};

pub(crate) fn register(r: &mut FunctionRegistry) {
    use crate::def::FnKind::Map;
    r.register_map("decode_png", 1, |e, args| on_component(e, args, decode_png));
    r.set_arg_check(Map, "decode_png", check_name);
    r.register_map("center_crop", 3, |e, args| {
        let (h, w) = (size_arg(args, 1)?, size_arg(args, 2)?);
        on_component(e, args, |t| center_crop(t, h, w))
    });
    r.set_arg_check(Map, "center_crop", check_crop);
    r.register_map("normalize", 1, |e, args| on_component(e, args, normalize));
    r.set_arg_check(Map, "normalize", check_name);
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

/// A positive integer argument (a crop height or width).
fn size_arg(args: &[Arg], i: usize) -> Result<u64, String> {
    match args.get(i) {
        Some(Arg::Int(v)) if *v > 0 => Ok(*v as u64),
        other => Err(format!("argument {i} must be a positive integer size, got {other:?}")),
    }
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

/// The largest image `decode_png` decodes: 256 MiB of `uint8` pixels (e.g. 8192 ×
/// 8192 RGBA). A PNG header declares any size up to 2^31 − 1 on each side; the
/// decoded size is checked against this before the pixel buffer is allocated.
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;

/// A bytes scalar holding a PNG → `uint8 [h, w, c]`. Palette and low-bit images are
/// expanded, 16-bit ones stripped to 8 bits. The size the header declares is checked
/// against [`MAX_IMAGE_BYTES`] before the output buffer is allocated (the png
/// crate's `Limits` bound only its own buffers, not the output), so a forged
/// header fails its element instead of allocating gigabytes (a 70-byte file whose
/// header claims 15,599,616 × 131,072 pixels used to allocate 2 TB; found by fuzzing).
pub(crate) fn decode_png(t: &Tensor) -> Result<Tensor, String> {
    if !t.shape().is_empty() || !matches!(t.dtype(), DType::Bytes | DType::String) {
        return Err(format!(
            "expected a bytes scalar (a PNG file), got {} {:?}",
            t.dtype().name(),
            t.shape()
        ));
    }
    let items = t.items().map_err(|e| e.to_string())?;
    let data = items.first().ok_or("empty scalar")?;
    let limits = png::Limits { bytes: MAX_IMAGE_BYTES as usize };
    let mut decoder = png::Decoder::new_with_limits(std::io::Cursor::new(data.as_ref()), limits);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| match e {
        // The png crate's own buffers (sized from the header) hit `limits`.
        png::DecodingError::LimitsExceeded => over_limit(header_size(data), None),
        e => format!("not a valid PNG: {e}"),
    })?;
    check_declared_size(&reader)?;
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).map_err(|e| format!("not a valid PNG: {e}"))?;
    if frame.bit_depth != png::BitDepth::Eight {
        return Err(format!("unsupported bit depth {:?} after expansion", frame.bit_depth));
    }
    let channels = frame.color_type.samples() as u64;
    buf.truncate(frame.buffer_size());
    Tensor::from_u8s(vec![u64::from(frame.height), u64::from(frame.width), channels], buf)
        .map_err(|e| e.to_string())
}

/// Refuses an image whose decoded size (width × height × samples × bytes per
/// sample after the transformations) is over [`MAX_IMAGE_BYTES`], counted without
/// overflow.
fn check_declared_size<R: std::io::Read>(reader: &png::Reader<R>) -> Result<(), String> {
    let (width, height) = (reader.info().width, reader.info().height);
    let (color, depth) = reader.output_color_type();
    let sample_bytes = if depth == png::BitDepth::Sixteen { 2 } else { 1 };
    let bytes = u64::from(width)
        .checked_mul(u64::from(height))
        .and_then(|n| n.checked_mul(color.samples() as u64 * sample_bytes));
    match bytes {
        Some(b) if b <= MAX_IMAGE_BYTES => Ok(()),
        _ => Err(over_limit(Some((width, height)), Some(color.samples()))),
    }
}

/// Width and height from the IHDR chunk, which a valid PNG has first (bytes 16..24).
fn header_size(data: &[u8]) -> Option<(u32, u32)> {
    let field = |at: usize| Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?));
    Some((field(16)?, field(20)?))
}

fn over_limit(size: Option<(u32, u32)>, channels: Option<usize>) -> String {
    let size = size.map_or_else(|| "an image".into(), |(w, h)| format!("a {w}x{h} image"));
    let channels = channels.map_or_else(String::new, |c| format!(" of {c} channel(s)"));
    format!(
        "the PNG header declares {size}{channels}, over the limit of {MAX_IMAGE_BYTES} decoded \
         bytes (MAX_IMAGE_BYTES); is the file damaged?"
    )
}

/// `uint8 [H, W, C]` → its centered `[h, w, C]` window.
pub(crate) fn center_crop(t: &Tensor, h: u64, w: u64) -> Result<Tensor, String> {
    let &[height, width, c] = t.shape() else {
        return Err(format!(
            "expected a [height, width, channels] image, got shape {:?}",
            t.shape()
        ));
    };
    if t.dtype() != DType::Uint8 {
        return Err(format!("expected uint8 pixels, got {}", t.dtype().name()));
    }
    if h > height || w > width {
        return Err(format!("cannot crop {h}x{w} out of a {height}x{width} image"));
    }
    let (top, left) = ((height - h) / 2, (width - w) / 2);
    let row = (width * c) as usize;
    let (start, len) = ((left * c) as usize, (w * c) as usize);
    let data = t.data();
    let mut out = Vec::with_capacity((h * w * c) as usize);
    for y in top..top + h {
        let at = y as usize * row + start;
        out.extend_from_slice(&data[at..at + len]);
    }
    Tensor::from_u8s(vec![h, w, c], out).map_err(|e| e.to_string())
}

/// `uint8` → `float32` `x / 255`, same shape.
pub(crate) fn normalize(t: &Tensor) -> Result<Tensor, String> {
    if t.dtype() != DType::Uint8 {
        return Err(format!("expected uint8 pixels, got {}", t.dtype().name()));
    }
    let values: Vec<f32> = t.data().iter().map(|&x| f32::from(x) / 255.0).collect();
    Tensor::from_f32s(t.shape().to_vec(), &values).map_err(|e| e.to_string())
}
