//! Elements as Python values, without copying tensor bytes.
//!
//! A fixed-width tensor becomes a read-only numpy array whose data pointer is the
//! received payload (`bytes::Bytes`, a slice of the HTTP/2 frame it arrived in)
//! and whose `base` is a [`TensorData`] holding that payload alive: nothing is
//! copied, and numpy refuses writes. The one exception is a payload that is not
//! aligned for its dtype (a slice can start anywhere in a frame): it is copied
//! once into an aligned buffer, because numpy's fast paths assume alignment.
//!
//! `string`/`bytes` tensors are `bytes` objects (a scalar) or numpy object arrays
//! of `bytes`. A one-component element is its tensor, several components a tuple,
//! named components (a parsed `tf.train.Example`) a dict.

use std::os::raw::{c_int, c_void};

use bytes::Bytes;
use numpy::npyffi::{self, npy_intp, NpyTypes, PY_ARRAY_API};
use numpy::{Element as NpElement, PyArrayDescrMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use sluice_dataset::{DType, Element, Tensor};

use crate::errors;

#[cfg(target_endian = "big")]
compile_error!("tensor payloads are little-endian; big-endian hosts need a byte-swapping copy");

/// The Rust buffer under a numpy array: `array.base` is one of these.
#[pyclass(frozen, module = "sluice._native")]
pub struct TensorData {
    data: Buffer,
}

enum Buffer {
    /// The received bytes themselves.
    Received(Bytes),
    /// A copy, for a payload misaligned for its dtype; `len` bytes are used.
    Aligned { words: Vec<u64>, len: usize },
}

impl Buffer {
    fn as_ptr(&self) -> *const u8 {
        match self {
            Buffer::Received(b) => b.as_ptr(),
            Buffer::Aligned { words, .. } => words.as_ptr().cast(),
        }
    }
    fn len(&self) -> usize {
        match self {
            Buffer::Received(b) => b.len(),
            Buffer::Aligned { len, .. } => *len,
        }
    }
}

#[pymethods]
impl TensorData {
    /// Bytes held.
    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// True when the array views the received bytes, false when they were copied
    /// once for alignment.
    #[getter]
    fn zero_copy(&self) -> bool {
        matches!(self.data, Buffer::Received(_))
    }
}

/// The Python value of an element.
pub fn to_python(py: Python<'_>, element: Element) -> PyResult<Py<PyAny>> {
    let Element { components, names, .. } = element;
    if let Some(names) = names {
        let dict = PyDict::new(py);
        for (name, t) in names.iter().zip(components) {
            dict.set_item(name, tensor_to_python(py, t)?)?;
        }
        return Ok(dict.into_any().unbind());
    }
    if components.len() == 1 {
        let t = components.into_iter().next().expect("one component");
        return tensor_to_python(py, t);
    }
    let items =
        components.into_iter().map(|t| tensor_to_python(py, t)).collect::<PyResult<Vec<_>>>()?;
    Ok(PyTuple::new(py, items)?.into_any().unbind())
}

fn tensor_to_python(py: Python<'_>, t: Tensor) -> PyResult<Py<PyAny>> {
    match t.dtype() {
        DType::Int64 => array::<i64>(py, &t),
        DType::Float32 => array::<f32>(py, &t),
        DType::Float64 => array::<f64>(py, &t),
        DType::Bool => array::<bool>(py, &t),
        DType::Uint8 => array::<u8>(py, &t),
        DType::Int32 => array::<i32>(py, &t),
        DType::String | DType::Bytes => strings(py, &t),
    }
}

/// A read-only numpy array over the tensor's payload.
fn array<T: NpElement>(py: Python<'_>, t: &Tensor) -> PyResult<Py<PyAny>> {
    let payload = t.data();
    let width = std::mem::size_of::<T>();
    let data = if (payload.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
        Buffer::Received(payload.clone())
    } else {
        let mut words = vec![0u64; payload.len().div_ceil(8)];
        // SAFETY: `words` holds at least `payload.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                words.as_mut_ptr().cast::<u8>(),
                payload.len(),
            );
        }
        Buffer::Aligned { words, len: payload.len() }
    };
    let mut dims: Vec<npy_intp> = t.shape().iter().map(|d| *d as npy_intp).collect();
    // Checked again here, where a wrong size would let numpy read past the buffer.
    let expected = t
        .shape()
        .iter()
        .try_fold(width as u64, |n, d| n.checked_mul(*d))
        .and_then(|n| usize::try_from(n).ok());
    if expected != Some(data.len()) {
        return Err(errors::internal(format!(
            "a {} tensor of shape {:?} arrived with {} bytes (expected {expected:?})",
            t.dtype().name(),
            t.shape(),
            data.len()
        )));
    }
    let ptr = data.as_ptr();
    let base = Bound::new(py, TensorData { data })?;
    let descr = T::get_dtype(py).into_dtype_ptr();
    // SAFETY: `descr` is a new reference that NewFromDescr steals; `ptr` points to
    // `expected` bytes that live as long as `base`, which becomes the array's base
    // (SetBaseObject steals that reference too). No WRITEABLE flag: read-only.
    unsafe {
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, NpyTypes::PyArray_Type),
            descr,
            dims.len() as c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            ptr as *mut c_void,
            npyffi::NPY_ARRAY_C_CONTIGUOUS,
            std::ptr::null_mut(),
        );
        if array.is_null() {
            return Err(PyErr::fetch(py));
        }
        let owned = Bound::<PyAny>::from_owned_ptr(py, array).unbind();
        if PY_ARRAY_API.PyArray_SetBaseObject(py, array.cast(), base.into_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(owned)
    }
}

/// `bytes` for a scalar, else a numpy object array of `bytes` in the tensor's shape.
fn strings(py: Python<'_>, t: &Tensor) -> PyResult<Py<PyAny>> {
    let items = t.items().map_err(|e| errors::internal(e.to_string()))?;
    if t.shape().is_empty() {
        let item = items.first().map(|b| b.as_ref()).unwrap_or_default();
        return Ok(PyBytes::new(py, item).into_any().unbind());
    }
    let list = PyList::new(py, items.iter().map(|b| PyBytes::new(py, b)))?;
    let numpy = py.import("numpy")?;
    let object = numpy.getattr("object_")?;
    let flat = numpy.call_method1("array", (list, object))?;
    let shape: Vec<u64> = t.shape().to_vec();
    Ok(flat.call_method1("reshape", (shape,))?.unbind())
}
