//! The maps that move pixels: `center_crop`, `resize`, `random_resized_crop`
//! (torchvision's `RandomResizedCrop`) and `random_flip` (horizontal).
//!
//! Resizing goes through `fast_image_resize` (SIMD, chosen at run time), with the
//! crop box passed to it so that a crop and its resize are one pass over the
//! pixels. Its filters are convolutions: downscaling averages over the whole
//! footprint (antialiased, as Pillow and torchvision's `antialias=True` do).
//! Channels are resized independently (no alpha premultiplication).

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::seeded::{ElementRng, Op};
use super::{check_name, check_output_size, image_shape, seed_arg, size_arg};
use crate::def::Arg;
use crate::registry::ElementKey;
use crate::tensor::Tensor;

/// `uint8 [H, W, C]` → its centered `[h, w, C]` window.
pub(crate) fn center_crop(t: &Tensor, h: u64, w: u64) -> Result<Tensor, String> {
    let (height, width, c) = image_shape(t)?;
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

/// A resampling filter of `resize` and `random_resized_crop`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Filter {
    Nearest,
    Bilinear,
    Bicubic,
    Lanczos3,
}

impl Filter {
    pub(super) const NAMES: &'static str = "nearest, bilinear, bicubic or lanczos3";

    pub(super) fn from_name(name: &str) -> Result<Self, String> {
        match name {
            "nearest" => Ok(Filter::Nearest),
            "bilinear" => Ok(Filter::Bilinear),
            "bicubic" => Ok(Filter::Bicubic),
            "lanczos3" => Ok(Filter::Lanczos3),
            other => Err(format!("unknown filter {other:?}; use {}", Self::NAMES)),
        }
    }

    fn algorithm(self) -> ResizeAlg {
        match self {
            Filter::Nearest => ResizeAlg::Nearest,
            Filter::Bilinear => ResizeAlg::Convolution(FilterType::Bilinear),
            Filter::Bicubic => ResizeAlg::Convolution(FilterType::CatmullRom),
            Filter::Lanczos3 => ResizeAlg::Convolution(FilterType::Lanczos3),
        }
    }
}

/// A window of an image: `top`, `left`, `height`, `width` in pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Window {
    top: u64,
    left: u64,
    height: u64,
    width: u64,
}

/// `uint8 [H, W, C]` → `uint8 [h, w, C]`, the whole image resized with `filter`.
pub(super) fn resize(t: &Tensor, h: u64, w: u64, filter: Filter) -> Result<Tensor, String> {
    let (height, width, _) = image_shape(t)?;
    let whole = Window { top: 0, left: 0, height, width };
    resize_window(t, whole, h, w, filter)
}

/// The pixels of `window` of `t` resized to `[h, w, C]`.
fn resize_window(
    t: &Tensor,
    window: Window,
    h: u64,
    w: u64,
    filter: Filter,
) -> Result<Tensor, String> {
    let (height, width, c) = image_shape(t)?;
    check_output_size(h, w, c)?;
    let pixel = match c {
        1 => PixelType::U8,
        2 => PixelType::U8x2,
        3 => PixelType::U8x3,
        4 => PixelType::U8x4,
        _ => return Err(format!("expected 1 to 4 channels, got {c}")),
    };
    if height == 0 || width == 0 {
        return Err(format!("cannot resize an empty {height}x{width} image"));
    }
    let side = |n: u64| u32::try_from(n).map_err(|_| format!("a side of {n} pixels is too long"));
    let src = ImageRef::new(side(width)?, side(height)?, t.data(), pixel)
        .map_err(|e| format!("the image's pixels do not fill its shape: {e}"))?;
    // Within the u32 sides and MAX_IMAGE_BYTES, checked above.
    let mut dst = Image::new(w as u32, h as u32, pixel);
    let options = ResizeOptions::new()
        .resize_alg(filter.algorithm())
        .crop(window.left as f64, window.top as f64, window.width as f64, window.height as f64)
        .use_alpha(false);
    Resizer::new().resize(&src, &mut dst, &options).map_err(|e| format!("resize failed: {e}"))?;
    Tensor::from_u8s(vec![h, w, c], dst.into_vec()).map_err(|e| e.to_string())
}

/// `random_resized_crop(name, h, w, seed[, scale_lo, scale_hi[, ratio_lo, ratio_hi]])`:
/// torchvision's `RandomResizedCrop` with bilinear resizing, drawn from the
/// element's own stream (`seeded`).
#[derive(Clone, Copy, Debug)]
pub(super) struct RandomResizedCrop {
    h: u64,
    w: u64,
    seed: u64,
    scale: (f64, f64),
    ratio: (f64, f64),
}

impl RandomResizedCrop {
    /// The arguments, checked (also what the registry's check runs).
    pub(super) fn from_args(args: &[Arg]) -> Result<Self, String> {
        if !matches!(args.len(), 4 | 6 | 8) {
            return Err(format!(
                "takes the name, h, w and seed, then optionally scale_lo, scale_hi, then \
                 ratio_lo, ratio_hi (4, 6 or 8 arguments), got {}",
                args.len()
            ));
        }
        check_name(args)?;
        let (h, w) = (size_arg(args, 1)?, size_arg(args, 2)?);
        check_output_size(h, w, 1)?;
        let seed = seed_arg(args, 3)?;
        let scale = range_arg(args, 4, (0.08, 1.0), "scale")?;
        let ratio = range_arg(args, 6, (3.0 / 4.0, 4.0 / 3.0), "ratio")?;
        Ok(RandomResizedCrop { h, w, seed, scale, ratio })
    }

    pub(super) fn apply(&self, t: &Tensor, key: ElementKey<'_>) -> Result<Tensor, String> {
        let (height, width, _) = image_shape(t)?;
        if height == 0 || width == 0 {
            return Err(format!("cannot crop an empty {height}x{width} image"));
        }
        let mut rng = ElementRng::new(Op::RandomResizedCrop, self.seed, key);
        let window = self.window(height, width, &mut rng);
        resize_window(t, window, self.h, self.w, Filter::Bilinear)
    }

    /// torchvision's `RandomResizedCrop.get_params`: up to 10 tries of an area
    /// fraction in `scale` and a log-uniform aspect ratio in `ratio` (sides rounded
    /// half to even, as Python's `round`); the first that fits is placed uniformly.
    /// Else a center crop of the whole image clamped to `ratio`.
    fn window(&self, height: u64, width: u64, rng: &mut ElementRng) -> Window {
        let area = (height * width) as f64;
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target = area * rng.uniform(self.scale.0, self.scale.1);
            let aspect = rng.uniform(log_lo, log_hi).exp();
            let w = (target * aspect).sqrt().round_ties_even();
            let h = (target / aspect).sqrt().round_ties_even();
            if w > 0.0 && h > 0.0 && w <= width as f64 && h <= height as f64 {
                let (h, w) = (h as u64, w as u64);
                let top = rng.below(height - h + 1);
                let left = rng.below(width - w + 1);
                return Window { top, left, height: h, width: w };
            }
        }
        let in_ratio = width as f64 / height as f64;
        let (h, w) = if in_ratio < self.ratio.0 {
            let h = (width as f64 / self.ratio.0).round_ties_even() as u64;
            (h.clamp(1, height), width)
        } else if in_ratio > self.ratio.1 {
            let w = (height as f64 * self.ratio.1).round_ties_even() as u64;
            (height, w.clamp(1, width))
        } else {
            (height, width)
        };
        Window { top: (height - h) / 2, left: (width - w) / 2, height: h, width: w }
    }
}

/// An optional `[lo, hi]` pair of positive numbers at `args[i]`, `args[i + 1]`.
fn range_arg(
    args: &[Arg],
    i: usize,
    default: (f64, f64),
    what: &str,
) -> Result<(f64, f64), String> {
    if args.len() <= i {
        return Ok(default);
    }
    let number = |j: usize| match args.get(j) {
        Some(Arg::Int(v)) => Ok(*v as f64),
        Some(Arg::Float(v)) => Ok(*v),
        other => Err(format!("argument {j} ({what}) must be a number, got {other:?}")),
    };
    let (lo, hi) = (number(i)?, number(i + 1)?);
    if lo.is_finite() && hi.is_finite() && 0.0 < lo && lo <= hi {
        Ok((lo, hi))
    } else {
        Err(format!("{what} must be 0 < lo <= hi, got [{lo}, {hi}]"))
    }
}

/// `uint8 [H, W, C]` mirrored left to right with probability 1/2, drawn from the
/// element's own stream (`seeded`): a first draw `uniform(0, 1) < 0.5` flips.
pub(super) fn random_flip(t: &Tensor, seed: u64, key: ElementKey<'_>) -> Result<Tensor, String> {
    let (height, width, c) = image_shape(t)?;
    let flip = ElementRng::new(Op::RandomFlip, seed, key).uniform(0.0, 1.0) < 0.5;
    if !flip || c == 0 || width < 2 {
        return Ok(t.clone());
    }
    let (c, row) = (c as usize, (width * c) as usize);
    let data = t.data();
    let mut out = Vec::with_capacity(data.len());
    for y in 0..height as usize {
        let line = &data[y * row..(y + 1) * row];
        for pixel in line.chunks_exact(c).rev() {
            out.extend_from_slice(pixel);
        }
    }
    Tensor::from_u8s(vec![height, width, c as u64], out).map_err(|e| e.to_string())
}
