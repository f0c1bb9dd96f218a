//! The elements of one file: TFRecord records, text lines, WebDataset samples,
//! or just its name.
//!
//! Shared by the file sources (one file per split unit) and the `tfrecord` /
//! `text_lines` / `webdataset` dataset functions of `flat_map` / `interleave`. A
//! file is opened lazily, on the first pull, so that an interleave with a long
//! cycle holds only the files it is actually reading, and an open error arrives
//! as an error naming the file rather than failing the function call. The file
//! ends at its first error, except an element error (a bad WebDataset sample,
//! `DatasetError::is_element_error`), past which the file's framing still holds.

use std::io::{BufRead, Read};

use crate::error::DatasetError;
use crate::formats::tfrecord::TfRecordReader;
use crate::formats::webdataset::SampleReader;
pub(crate) use crate::formats::FileFormat;
use crate::io::{self, DataRoots};
use crate::tensor::{DType, Element, Tensor, ITEM_PREFIX};

use super::stream::ElementIter;

/// The longest line `text_lines` accepts (a file without newlines would otherwise
/// have to be held whole).
pub const MAX_LINE_BYTES: u64 = 64 << 20;

/// A line buffer's first allocation; longer lines grow it.
const LINE_CAPACITY: usize = 256;

/// The file name held by a one-component string (or bytes) scalar element, as
/// `list_files` produces.
pub(crate) fn file_name(e: &Element) -> Result<String, String> {
    let name = match e.components.as_slice() {
        [t] if t.shape().is_empty() && matches!(t.dtype(), DType::String | DType::Bytes) => {
            t.items().map_err(|e| e.to_string())?.into_iter().next()
        }
        _ => None,
    };
    let name = name.ok_or_else(|| {
        "expected a string scalar naming a file (e.g. from list_files)".to_string()
    })?;
    String::from_utf8(name.to_vec()).map_err(|_| "the file name is not UTF-8".to_string())
}

/// The elements of `url` in `format`, opening it on first pull, if `roots` admit it.
pub(crate) fn elements(url: String, format: FileFormat, roots: DataRoots) -> ElementIter {
    Box::new(LazyFile { url, format, roots, inner: None, done: false })
}

struct LazyFile {
    url: String,
    format: FileFormat,
    roots: DataRoots,
    inner: Option<ElementIter>,
    done: bool,
}

impl Iterator for LazyFile {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.inner.is_none() {
            match open_elements(&self.url, &self.roots, self.format) {
                Ok(elements) => self.inner = Some(elements),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        let item = self.inner.as_mut()?.next();
        let goes_on = match &item {
            Some(Ok(_)) => true,
            Some(Err(e)) => e.is_element_error(),
            None => false,
        };
        if !goes_on {
            self.done = true;
            self.inner = None; // close the file now
        }
        item
    }
}

/// The elements of the file `url` in `format`. A TFRecord reader buffers its
/// input itself (large records are read straight into their tensors); lines
/// come out of the file's read buffer.
fn open_elements(
    url: &str,
    roots: &DataRoots,
    format: FileFormat,
) -> Result<ElementIter, DatasetError> {
    Ok(match format {
        FileFormat::TfRecord { skip_corrupt } => {
            let reader = io::open_unbuffered_in(url, roots)?;
            let mut records = TfRecordReader::new(reader, url, skip_corrupt);
            let url = url.to_string();
            Box::new(std::iter::from_fn(move || {
                let framed = records.next_framed()?;
                Some(framed.and_then(|f| framed_element(DType::Bytes, f, &url)))
            }))
        }
        FileFormat::TextLines => {
            let input = io::open_in(url, roots)?;
            Box::new(Lines { input, url: url.to_string(), offset: 0 })
        }
        FileFormat::WebDataset => Box::new(SampleReader::new(io::open_in(url, roots)?, url)),
    })
}

/// A scalar element made in place from a reader's framed buffer (no copy).
fn framed_element(dtype: DType, framed: Vec<u8>, url: &str) -> Result<Element, DatasetError> {
    Tensor::scalar_item_framed(dtype, framed)
        .map(Element::single)
        .ok_or_else(|| DatasetError::io(url, "an item longer than 4 GiB cannot be a tensor item"))
}

/// Lines of a text file, streamed, without their `\n` / `\r\n`.
struct Lines<R> {
    input: R,
    url: String,
    offset: u64,
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Room for the item's length, so the line becomes a tensor in place.
        let mut line = Vec::with_capacity(ITEM_PREFIX + LINE_CAPACITY);
        line.resize(ITEM_PREFIX, 0);
        let limit = MAX_LINE_BYTES + 1;
        let read = match (&mut self.input).take(limit).read_until(b'\n', &mut line) {
            Err(e) => return Some(Err(DatasetError::reading(&self.url, &e))),
            Ok(0) => return None,
            Ok(n) => n,
        };
        let at = self.offset;
        self.offset += read as u64;
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        if (line.len() - ITEM_PREFIX) as u64 > MAX_LINE_BYTES {
            return Some(Err(DatasetError::Corrupt {
                format: "text file",
                file: self.url.clone(),
                offset: at,
                message: format!(
                    "line longer than {MAX_LINE_BYTES} bytes; is this a text file? \
                     (read binary data with tfrecord)"
                ),
            }));
        }
        // Strings are not checked for UTF-8, like tf.data's TextLineDataset.
        Some(framed_element(DType::String, line, &self.url))
    }
}

#[cfg(test)]
mod tests {
    use crate::formats::tfrecord::TfRecordWriter;
    use crate::registry::FunctionRegistry;
    use crate::tensor::{Element, Tensor};

    fn texts(it: super::ElementIter) -> Vec<String> {
        it.map(|r| {
            let item = r.expect("ok").components[0].items().expect("bytes").remove(0);
            String::from_utf8_lossy(&item).into_owned()
        })
        .collect()
    }

    #[test]
    fn dataset_functions_read_the_named_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rec = dir.path().join("a.tfrecord").to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        let mut w = TfRecordWriter::new(&mut bytes);
        for r in ["r0", "r1", "r2"] {
            w.write(r.as_bytes()).expect("write");
        }
        bytes[18 + 12] ^= 1; // r1's data (records are 12 + 2 + 4 bytes)
        std::fs::write(&rec, &bytes).expect("write");
        let txt = dir.path().join("a.txt").to_string_lossy().into_owned();
        std::fs::write(&txt, "x\ny\n").expect("write");

        let r = FunctionRegistry::builtin();
        let call = |name: &str, file: &str| {
            let f = r.dataset_fn(name).expect("registered");
            f(Element::single(Tensor::scalar_str(file)), &[]).expect("an iterator")
        };
        assert_eq!(texts(call("tfrecord_skip_corrupt", &rec)), ["r0", "r2"]);
        let out: Vec<_> = call("tfrecord", &rec).collect();
        assert_eq!(out.len(), 2);
        assert!(out[1].as_ref().is_err_and(|e| e.to_string().contains("byte 18")));
        assert_eq!(texts(call("text_lines", &txt)), ["x", "y"]);

        let f = r.dataset_fn("tfrecord").expect("registered");
        let err = f(Element::single(Tensor::scalar_i64(1)), &[]).err().expect("not a name");
        assert!(err.contains("string scalar naming a file"), "{err}");
    }
}
