//! `resize`, `random_resized_crop`, `random_flip` and `normalize`: shapes, values,
//! torchvision's crop semantics, and seeded randomness that a replay reproduces.

use std::collections::BTreeMap;

use sluice_dataset::{
    Arg, DType, DatasetDef, DatasetError, Element, FnCall, FnKind, FunctionRegistry, SplitProvider,
    SplitRange, Tensor,
};

use super::{apply, img};

/// A `[h, w, c]` image of noise (no two windows alike).
fn image(h: u64, w: u64, c: u64) -> Tensor {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<u8> = (0..h * w * c)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect();
    Tensor::from_u8s(vec![h, w, c], data).expect("image")
}

fn pixels_of(e: &Element) -> (Vec<u64>, Vec<u8>) {
    let t = e.get("img").expect("img");
    (t.shape().to_vec(), t.data().to_vec())
}

/// The error of `name(img, args...)` on `t`, which must fail.
fn one_err(t: Tensor, name: &str, args: Vec<Arg>) -> String {
    match one(t, name, args) {
        Ok(t) => panic!("made {:?} instead of failing", t.shape()),
        Err(e) => e,
    }
}

fn one(t: Tensor, name: &str, args: Vec<Arg>) -> Result<Tensor, String> {
    let mut all = vec![img()];
    all.extend(args);
    apply(t, vec![(name, all)])
        .map(|e| e.get("img").expect("img").clone())
        .map_err(|e| e.to_string())
}

#[test]
fn resize_makes_the_asked_shape_and_keeps_a_flat_image_flat() {
    for c in 1..=4 {
        let t = one(image(31, 17, c), "resize", vec![Arg::Int(8), Arg::Int(40)]).expect("resizes");
        assert_eq!((t.dtype(), t.shape()), (DType::Uint8, &[8, 40, c][..]));
    }
    let flat = Tensor::from_u8s(vec![9, 7, 3], vec![77u8; 9 * 7 * 3]).expect("flat");
    for filter in ["nearest", "bilinear", "bicubic", "lanczos3"] {
        let t =
            one(flat.clone(), "resize", vec![Arg::Int(4), Arg::Int(5), Arg::Str(filter.into())])
                .expect("resizes");
        assert!(t.data().iter().all(|&v| v == 77), "{filter}: {:?}", t.data());
    }
    // The same size is the same image.
    let t = image(6, 5, 3);
    assert_eq!(one(t.clone(), "resize", vec![Arg::Int(6), Arg::Int(5)]).expect("same"), t);

    let r = FunctionRegistry::builtin();
    let check = |args: Vec<Arg>| r.check_call(FnKind::Map, &FnCall::new("resize", args));
    let err =
        check(vec![img(), Arg::Int(8), Arg::Int(8), Arg::Str("cubic".into())]).expect_err("filter");
    assert!(err.to_string().contains("nearest, bilinear, bicubic or lanczos3"), "{err}");
    let err = check(vec![img(), Arg::Int(1 << 20), Arg::Int(1 << 20)]).expect_err("too large");
    assert!(err.to_string().contains("MAX_IMAGE_BYTES"), "{err}");
    let err = check(vec![img(), Arg::Int(8)]).expect_err("arity");
    assert!(err.to_string().contains("expected 3 to 4 arguments, got 2"), "{err}");
    let err = one_err(Tensor::scalar_i64(1), "resize", vec![Arg::Int(2), Arg::Int(2)]);
    assert!(err.contains("[height, width, channels]"), "{err}");
}

/// The `[h, w]` windows of `t` (an `[H, W, C]` image) equal to `crop`.
fn windows_equal_to(t: &Tensor, crop: &Tensor) -> Vec<(u64, u64)> {
    let (&[height, width, c], &[h, w, _]) = (t.shape(), crop.shape()) else { panic!("images") };
    let (data, want) = (t.data(), crop.data());
    let mut found = Vec::new();
    for top in 0..=height - h {
        for left in 0..=width - w {
            let same = (0..h).all(|y| {
                let at = (((top + y) * width + left) * c) as usize;
                let row = (y * w * c) as usize;
                data[at..at + (w * c) as usize] == want[row..row + (w * c) as usize]
            });
            if same {
                found.push((top, left));
            }
        }
    }
    found
}

#[test]
fn random_resized_crop_follows_torchvision_tries_then_the_center_fallback() {
    let t = image(40, 40, 3);
    // Area fraction 1/4 and ratio 1: every try gives a 20 × 20 window, placed at
    // random; asking for 20 × 20 out makes the resize an identity.
    let args = |seed: i64| {
        vec![
            Arg::Int(20),
            Arg::Int(20),
            Arg::Int(seed),
            Arg::Float(0.25),
            Arg::Float(0.25),
            Arg::Int(1),
            Arg::Int(1),
        ]
    };
    let mut places = std::collections::BTreeSet::new();
    for seed in 0..20 {
        let crop = one(t.clone(), "random_resized_crop", args(seed)).expect("crops");
        assert_eq!(crop.shape(), &[20, 20, 3]);
        let found = windows_equal_to(&t, &crop);
        assert_eq!(found.len(), 1, "seed {seed}: a window of the image");
        places.insert(found[0]);
    }
    assert!(places.len() > 10, "placed at random: {places:?}");

    // No try fits (the area asked for is twice the image's): a center crop of
    // the whole image clamped to the ratio range, here 13 × 10 out of 100 × 10.
    let tall = image(100, 10, 1);
    let fallback = vec![Arg::Int(13), Arg::Int(10), Arg::Int(7), Arg::Int(2), Arg::Int(3)];
    let crop = one(
        tall.clone(),
        "random_resized_crop",
        [fallback, vec![Arg::Float(0.75), Arg::Float(4.0 / 3.0)]].concat(),
    )
    .expect("crops");
    let centre = one(tall, "center_crop", vec![Arg::Int(13), Arg::Int(10)]).expect("centre");
    assert_eq!(crop, centre);

    // Default scale and ratio: the asked shape, for 1 to 4 channels.
    for c in 1..=4 {
        let out = one(
            image(57, 83, c),
            "random_resized_crop",
            vec![Arg::Int(24), Arg::Int(32), Arg::Int(1)],
        )
        .expect("crops");
        assert_eq!((out.dtype(), out.shape()), (DType::Uint8, &[24, 32, c][..]));
    }
    let r = FunctionRegistry::builtin();
    let check =
        |args: Vec<Arg>| r.check_call(FnKind::Map, &FnCall::new("random_resized_crop", args));
    let bad = [img(), Arg::Int(8), Arg::Int(8), Arg::Int(1), Arg::Float(0.5), Arg::Float(0.1)];
    let err = check(bad.to_vec()).expect_err("lo > hi");
    assert!(err.to_string().contains("scale must be 0 < lo <= hi"), "{err}");
    let err = check(vec![img(), Arg::Int(8), Arg::Int(8), Arg::Int(1), Arg::Float(0.5)])
        .expect_err("a scale without its upper end");
    assert!(err.to_string().contains("4, 6 or 8 arguments"), "{err}");
    let err = check(vec![img(), Arg::Int(8), Arg::Int(8), Arg::Float(1.5)]).expect_err("seed");
    assert!(err.to_string().contains("integer seed"), "{err}");
}

/// A registry whose `picture` map makes `{id, img}` of a range element: the same
/// image for every element.
fn picture_registry() -> FunctionRegistry {
    let mut registry = FunctionRegistry::builtin();
    let picture = image(48, 64, 3);
    registry.register_map("picture", 0, move |e, _| {
        let id = e.as_i64().map_err(|e| e.to_string())?;
        Element::named(
            vec!["id".into(), "img".into()],
            vec![Tensor::scalar_i64(id), picture.clone()],
        )
        .map_err(|e| e.to_string())
    });
    registry
}

fn augment(def: DatasetDef, seed: i64, parallel: u32) -> DatasetDef {
    def.map("picture")
        .parallel_map(
            "random_resized_crop",
            vec![img(), Arg::Int(16), Arg::Int(16), Arg::Int(seed)],
            parallel,
        )
        .map_with("random_flip", vec![img(), Arg::Int(seed)])
}

/// Hands out fixed splits once.
struct Splits(Vec<(u64, u64)>);

impl SplitProvider for Splits {
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError> {
        Ok((!self.0.is_empty())
            .then(|| self.0.remove(0))
            .map(|(begin, end)| SplitRange { begin, end }))
    }
    fn reset(&mut self) -> Result<(), DatasetError> {
        Ok(())
    }
}

/// Each element's id → its image, from a tagged run (an exactly-once task).
fn tagged_crops(def: &DatasetDef, splits: Option<Vec<(u64, u64)>>) -> BTreeMap<i64, Vec<u8>> {
    let splits = splits.map(|s| Box::new(Splits(s)) as Box<dyn SplitProvider>);
    let tagged = def.iter_tagged(&picture_registry(), splits).expect("starts");
    tagged
        .elements
        .map(|e| {
            let e = e.expect("ok");
            (e.get("id").expect("id").as_i64().expect("int"), pixels_of(&e).1)
        })
        .collect()
}

#[test]
fn a_replayed_element_gets_the_same_crop_and_flip_and_other_elements_others() {
    let def = augment(DatasetDef::range(12), 5, 1);
    let first = tagged_crops(&def, None);
    assert_eq!(first.len(), 12);
    // Replayed on "another worker": other splits, in another order, mapped on 3
    // threads; every element's crop and flip come out the same.
    let parallel = augment(DatasetDef::range(12), 5, 3);
    let replay = tagged_crops(&parallel, Some(vec![(7, 12), (3, 7), (0, 3)]));
    assert_eq!(replay, first, "same (seed, origin), same pixels");
    let distinct: std::collections::BTreeSet<&Vec<u8>> = first.values().collect();
    assert!(
        distinct.len() >= 11,
        "origins draw their own crops: {} distinct of 12",
        distinct.len()
    );
    // Another seed, other crops.
    let other = tagged_crops(&augment(DatasetDef::range(12), 6, 1), None);
    assert!(other.iter().filter(|(id, px)| first[id] != **px).count() >= 11);
}

#[test]
fn untagged_the_crop_follows_the_position_in_the_stream_and_each_epoch_differs() {
    let registry = picture_registry();
    let run = |def: &DatasetDef| -> Vec<Vec<u8>> {
        def.iter_local(&registry).expect("starts").map(|e| pixels_of(&e.expect("ok")).1).collect()
    };
    let def = augment(DatasetDef::range(6), 9, 1).repeat(2);
    let once = run(&def);
    assert_eq!(once, run(&def), "the same run again draws the same");
    assert_eq!(once, run(&augment(DatasetDef::range(6), 9, 4).repeat(2)), "at any parallelism");
    assert_eq!(once.len(), 12);
    let same_in_both_epochs = (0..6).filter(|&i| once[i] == once[i + 6]).count();
    assert!(
        same_in_both_epochs <= 1,
        "the second epoch draws anew: {same_in_both_epochs} of 6 repeat"
    );
}

#[test]
fn random_flip_mirrors_about_half_the_elements() {
    let t = image(3, 4, 2);
    let mirrored: Vec<u8> = t
        .data()
        .chunks_exact(4 * 2)
        .flat_map(|row| row.chunks_exact(2).rev().flatten().copied().collect::<Vec<u8>>())
        .collect();
    let mut flipped = 0;
    for seed in 0..200 {
        let out = one(t.clone(), "random_flip", vec![Arg::Int(seed)]).expect("flips or not");
        assert_eq!(out.shape(), t.shape());
        if out.data().as_ref() == &mirrored[..] {
            flipped += 1;
        } else {
            assert_eq!(out, t, "seed {seed}: unchanged when not mirrored");
        }
    }
    assert!((70..=130).contains(&flipped), "p = 0.5: {flipped} of 200 mirrored");
}

#[test]
fn normalize_takes_mean_and_std_per_channel_in_hwc_or_chw() {
    // 1 × 2 RGB: pixels (0, 51, 255) and (255, 102, 0).
    let t = Tensor::from_u8s(vec![1, 2, 3], vec![0, 51, 255, 255, 102, 0]).expect("image");
    let (mean, std) = ([0.5, 0.2, 0.0], [0.5, 0.1, 2.0]);
    let args: Vec<Arg> = mean.iter().chain(&std).map(|v| Arg::Float(*v)).collect();
    let f = |x: u8, c: usize| (f32::from(x) / 255.0 - mean[c] as f32) / std[c] as f32;
    let hwc = one(t.clone(), "normalize", args.clone()).expect("hwc");
    assert_eq!((hwc.dtype(), hwc.shape()), (DType::Float32, &[1, 2, 3][..]));
    let want: Vec<f32> =
        [0, 51, 255, 255, 102, 0].iter().enumerate().map(|(i, &x)| f(x, i % 3)).collect();
    assert_eq!(hwc.f32_values().expect("f32"), want);
    let chw =
        one(t.clone(), "normalize", [args, vec![Arg::Str("chw".into())]].concat()).expect("chw");
    assert_eq!(chw.shape(), &[3, 1, 2]);
    assert_eq!(
        chw.f32_values().expect("f32"),
        [f(0, 0), f(255, 0), f(51, 1), f(102, 1), f(255, 2), f(0, 2)]
    );
    // One mean and std for every channel; x / 255 transposed.
    let all =
        one(t.clone(), "normalize", vec![Arg::Float(0.5), Arg::Float(0.5)]).expect("one each");
    assert_eq!(all.f32_values().expect("f32")[2], 1.0);
    let unit = one(t.clone(), "normalize", vec![Arg::Str("chw".into())]).expect("x / 255");
    assert_eq!(unit.f32_values().expect("f32")[..2], [0.0, 1.0]);

    let err = one_err(
        t,
        "normalize",
        vec![Arg::Float(0.5), Arg::Float(0.5), Arg::Float(1.0), Arg::Float(1.0)],
    );
    assert!(err.contains("2 means and stds for an image of 3 channel(s)"), "{err}");
    let r = FunctionRegistry::builtin();
    let check = |args: Vec<Arg>| {
        r.check_call(FnKind::Map, &FnCall::new("normalize", [vec![img()], args].concat()))
    };
    for (args, says) in [
        (vec![Arg::Float(0.5)], "as many stds as means"),
        (vec![Arg::Float(0.5), Arg::Float(0.0)], "positive"),
        (vec![Arg::Str("nhwc".into())], "\"hwc\" or \"chw\""),
        (vec![Arg::Str("chw".into()), Arg::Float(0.5), Arg::Float(0.5)], "finite number"),
    ] {
        let err = check(args).expect_err("refused before running");
        assert!(err.to_string().contains(says), "{err}");
    }
}
