//! `normalize`: `uint8` pixels → `float32` `(x / 255 − mean[c]) / std[c]`, in the
//! image's `[H, W, C]` layout or transposed to `[C, H, W]` (what PyTorch models
//! take), in one pass through a 256-entry table per channel.

use super::image_shape;
use crate::def::Arg;
use crate::tensor::{DType, Tensor};

/// The output layout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Layout {
    Hwc,
    Chw,
}

/// `normalize`'s arguments after the component name: `mean..., std...` (one
/// value each for every channel, or one per channel, up to 4), then optionally
/// `"hwc"` or `"chw"`. With neither means nor stds, `x / 255`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Normalization {
    mean: Vec<f32>,
    std: Vec<f32>,
    layout: Layout,
}

impl Normalization {
    /// The most arguments: the name, 4 means, 4 stds and the layout.
    pub(crate) const MAX_ARGS: usize = 10;

    /// `x / 255`, same shape.
    pub(crate) fn unit() -> Self {
        Normalization { mean: vec![0.0], std: vec![1.0], layout: Layout::Hwc }
    }

    /// The arguments, checked (also what the registry's check runs).
    pub(crate) fn from_args(args: &[Arg]) -> Result<Self, String> {
        super::check_name(args)?;
        let mut rest = &args[1..];
        let mut layout = Layout::Hwc;
        if let Some((Arg::Str(last), before)) = rest.split_last() {
            layout = match last.as_str() {
                "hwc" => Layout::Hwc,
                "chw" => Layout::Chw,
                other => {
                    return Err(format!("the layout must be \"hwc\" or \"chw\", got {other:?}"))
                }
            };
            rest = before;
        }
        let numbers = rest
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                Arg::Int(v) => Ok(*v as f32),
                Arg::Float(v) if v.is_finite() => Ok(*v as f32),
                other => Err(format!(
                    "argument {} must be a finite number (a mean or std), got {other:?}",
                    i + 1
                )),
            })
            .collect::<Result<Vec<f32>, String>>()?;
        if numbers.is_empty() {
            return Ok(Normalization { layout, ..Self::unit() });
        }
        if numbers.len() % 2 != 0 || numbers.len() > 8 {
            return Err(format!(
                "give as many stds as means (1 each, or 1 per channel, up to 4), then \
                 optionally \"hwc\" or \"chw\"; got {} numbers",
                numbers.len()
            ));
        }
        let (mean, std) = numbers.split_at(numbers.len() / 2);
        if let Some(s) = std.iter().find(|s| !s.is_normal() || **s < 0.0) {
            return Err(format!("a std must be a positive number, got {s}"));
        }
        Ok(Normalization { mean: mean.to_vec(), std: std.to_vec(), layout })
    }
}

/// `uint8` → `float32` `(x / 255 − mean[c]) / std[c]`, computed in f32 as
/// torchvision's `ToTensor` then `Normalize`. Without means and stds, in HWC, any
/// shape is taken (and kept); otherwise the input must be `[H, W, C]` with one
/// mean (and std) for all channels or one per channel.
pub(crate) fn normalize(t: &Tensor, how: &Normalization) -> Result<Tensor, String> {
    if t.dtype() != DType::Uint8 {
        return Err(format!("expected uint8 pixels, got {}", t.dtype().name()));
    }
    if *how == Normalization::unit() {
        let values: Vec<f32> = t.data().iter().map(|&x| f32::from(x) / 255.0).collect();
        return Tensor::from_f32s(t.shape().to_vec(), &values).map_err(|e| e.to_string());
    }
    let (height, width, c) = image_shape(t)?;
    let per_channel = how.mean.len();
    if per_channel != 1 && per_channel as u64 != c {
        return Err(format!(
            "{per_channel} means and stds for an image of {c} channel(s); give 1 or {c}"
        ));
    }
    let tables: Vec<[f32; 256]> = (0..c as usize)
        .map(|ch| {
            let (m, s) = (how.mean[ch % per_channel], how.std[ch % per_channel]);
            std::array::from_fn(|x| (x as f32 / 255.0 - m) / s)
        })
        .collect();
    let data = t.data();
    let c = c as usize;
    let (values, shape) = match how.layout {
        Layout::Hwc => {
            let values = data.iter().enumerate().map(|(i, &x)| tables[i % c][x as usize]);
            (values.collect::<Vec<f32>>(), vec![height, width, c as u64])
        }
        Layout::Chw => {
            let plane = (height * width) as usize;
            let mut values = vec![0f32; data.len()];
            for (p, pixel) in data.chunks_exact(c.max(1)).enumerate() {
                for (ch, &x) in pixel.iter().enumerate() {
                    values[ch * plane + p] = tables[ch][x as usize];
                }
            }
            (values, vec![c as u64, height, width])
        }
    };
    Tensor::from_f32s(shape, &values).map_err(|e| e.to_string())
}
