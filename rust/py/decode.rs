//! `decode_message`: the fast path of `JsonAgentStoreSerializer.loads` for message records
//! (`stores/_decode.py::fast_message` with the JSON parse), over `crate::decode`.
//!
//! The record format is not written here: `set_record_schema` takes the tables of
//! `stores/_schema.py` (the serializer hands them over on import), and a record the core
//! vouches for is built as `fast_message` builds it: the record's class's `__new__`,
//! then every field set through `object.__setattr__` (the frozen dataclass's own `__init__`
//! does the same after checks the core already made). For any other record it returns None
//! and the caller decodes it on the checked path, which writes the error: both backends give
//! the same typed error because only one code writes it.

use crate::decode::{self, Checked, Kind, RecordType, Schema, Value};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple, PyType};
use std::sync::{Arc, PoisonError, RwLock};

/// What builds the objects of one record type.
struct Class {
    class: Py<PyType>,
    /// The class's `__new__` (a message class's is its native base's).
    new: Py<PyAny>,
    /// The attribute each field fills, in the order of the record type's fields.
    fields: Vec<Py<PyString>>,
    /// What an absent field reads as.
    defaults: Vec<Py<PyAny>>,
    /// The class's other fields, with the value a decoded object gets.
    unstored: Vec<(Py<PyString>, Py<PyAny>)>,
}

struct Decoder {
    schema: Schema,
    messages: Vec<Class>,
    parts: Vec<Class>,
    call: Class,
    usage: Class,
    object_setattr: Py<PyAny>,
    int: Py<PyAny>,
}

/// Set by `set_record_schema`; until then every record goes to the checked path.
static DECODER: RwLock<Option<Arc<Decoder>>> = RwLock::new(None);

/// One `stores._schema.Field`, as the binding reads it.
#[derive(FromPyObject)]
pub struct PyField {
    key: String,
    kind: String,
    required: bool,
    nullable: bool,
    default: Py<PyAny>,
}

/// One `stores._schema.Record`, as the binding reads it.
#[derive(FromPyObject)]
pub struct PyRecord {
    tag: Option<String>,
    cls: Py<PyType>,
    fields: Vec<PyField>,
    needs_one_of: Vec<String>,
    unstored: Vec<(String, Py<PyAny>)>,
}

/// The core's view of a record type, and what builds its objects.
fn record_type(py: Python<'_>, record: PyRecord) -> PyResult<(RecordType, Class)> {
    let (mut fields, mut names, mut defaults) = (Vec::new(), Vec::new(), Vec::new());
    for field in record.fields {
        let kind = Kind::named(&field.kind);
        let kind = kind
            .ok_or_else(|| PyValueError::new_err(format!("unknown field kind {:?}", field.kind)))?;
        names.push(PyString::intern(py, &field.key).unbind());
        defaults.push(field.default);
        fields.push(decode::Field {
            key: field.key,
            kind,
            required: field.required,
            nullable: field.nullable,
        });
    }
    let kind = RecordType::new(record.tag, fields, &record.needs_one_of);
    let intern = |(name, value): (String, _)| (PyString::intern(py, &name).unbind(), value);
    let class = Class {
        new: record.cls.bind(py).getattr("__new__")?.unbind(),
        class: record.cls,
        fields: names,
        defaults,
        unstored: record.unstored.into_iter().map(intern).collect(),
    };
    Ok((kind.map_err(PyValueError::new_err)?, class))
}

fn record_types(py: Python<'_>, records: Vec<PyRecord>) -> PyResult<(Vec<RecordType>, Vec<Class>)> {
    let types = records.into_iter().map(|record| record_type(py, record));
    Ok(types.collect::<PyResult<Vec<_>>>()?.into_iter().unzip())
}

/// Takes the record format from `stores/_schema.py` (its message, part, call and usage
/// records) and the values the message classes allow; `decode_message` decodes by them.
#[pyfunction]
#[pyo3(signature = (messages, parts, call, usage, max_inline_bytes, system_roles, image_details))]
#[allow(clippy::too_many_arguments)]
pub fn set_record_schema(
    py: Python<'_>,
    messages: Vec<PyRecord>,
    parts: Vec<PyRecord>,
    call: PyRecord,
    usage: PyRecord,
    max_inline_bytes: usize,
    system_roles: Vec<String>,
    image_details: Vec<String>,
) -> PyResult<()> {
    let (message_types, message_classes) = record_types(py, messages)?;
    let (part_types, part_classes) = record_types(py, parts)?;
    let (call_type, call_class) = record_type(py, call)?;
    let (usage_type, usage_class) = record_type(py, usage)?;
    let object = py.import("builtins")?.getattr("object")?;
    let decoder = Decoder {
        schema: Schema {
            messages: message_types,
            parts: part_types,
            call: call_type,
            usage: usage_type,
            max_inline_bytes,
            system_roles,
            image_details,
        },
        messages: message_classes,
        parts: part_classes,
        call: call_class,
        usage: usage_class,
        object_setattr: object.getattr("__setattr__")?.unbind(),
        int: py.import("builtins")?.getattr("int")?.unbind(),
    };
    // The decoder replaced is dropped after the lock is released (its objects' finalizers
    // run no code under it).
    let replaced = DECODER
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .replace(Arc::new(decoder));
    drop(replaced);
    Ok(())
}

/// The message a record holds when it is well formed, else None (decode it on the checked
/// path: `JsonAgentStoreSerializer.loads` does).
#[pyfunction]
#[pyo3(signature = (data, /))]
pub fn decode_message<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let decoder = DECODER
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let Some(decoder) = decoder else {
        return Ok(None);
    };
    let schema = &decoder.schema;
    let Some(record) =
        decode::parse(data.as_bytes()).and_then(|value| decode::message(value, schema))
    else {
        return Ok(None);
    };
    let builder = Builder {
        py,
        decoder: &decoder,
    };
    match (
        schema.messages.get(record.index),
        decoder.messages.get(record.index),
    ) {
        (Some(kind), Some(class)) => builder.build(kind, class, &record.values),
        _ => Ok(None),
    }
}

struct Builder<'py, 'd> {
    py: Python<'py>,
    decoder: &'d Decoder,
}

/// `Ok(None)`: the record holds something only the checked path can judge (an int Python
/// refuses to read, say).
type Built<'py> = PyResult<Option<Bound<'py, PyAny>>>;

impl<'py> Builder<'py, '_> {
    /// An object of `class` holding `values` (the checked fields of a record of type `kind`).
    fn build(&self, kind: &RecordType, class: &Class, values: &[Checked<'_>]) -> Built<'py> {
        let py = self.py;
        let object = class.new.bind(py).call1((&class.class,))?;
        let setattr = self.decoder.object_setattr.bind(py);
        let fields = kind.fields.iter().zip(&class.fields).zip(&class.defaults);
        for (((field, name), default), value) in fields.zip(values) {
            let value = match value {
                Checked::Default => default.bind(py).clone(),
                value => match self.value(field.kind, value)? {
                    Some(value) => value,
                    None => return Ok(None),
                },
            };
            setattr.call1((&object, name, value))?;
        }
        for (name, value) in &class.unstored {
            setattr.call1((&object, name, value))?;
        }
        Ok(Some(object))
    }

    /// A checked value of a field of `kind`.
    fn value(&self, kind: Kind, value: &Checked<'_>) -> Built<'py> {
        let py = self.py;
        let decoder = self.decoder;
        Ok(Some(match value {
            Checked::Default | Checked::Null => py.None().into_bound(py),
            Checked::Str(text) => PyString::new(py, text).into_any(),
            Checked::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
            Checked::Json(value) => return self.json(value),
            Checked::Bytes(data) => PyBytes::new(py, data).into_any(),
            Checked::Record(usage) => {
                return self.build(&decoder.schema.usage, &decoder.usage, &usage.values);
            }
            Checked::Records(records) => {
                let mut built = Vec::with_capacity(records.len());
                for record in records {
                    let (kind, class) = if kind == Kind::Calls {
                        (Some(&decoder.schema.call), Some(&decoder.call))
                    } else {
                        (
                            decoder.schema.parts.get(record.index),
                            decoder.parts.get(record.index),
                        )
                    };
                    let (Some(kind), Some(class)) = (kind, class) else {
                        return Ok(None);
                    };
                    let Some(object) = self.build(kind, class, &record.values)? else {
                        return Ok(None);
                    };
                    built.push(object);
                }
                PyTuple::new(py, built)?.into_any()
            }
        }))
    }

    /// A JSON value as `json.loads` makes it.
    fn json(&self, value: &Value<'_>) -> Built<'py> {
        let py = self.py;
        Ok(Some(match value {
            Value::Null => py.None().into_bound(py),
            Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
            Value::Int(number) => number.into_pyobject(py)?.into_any(),
            Value::BigInt(literal) => match self.decoder.int.bind(py).call1((*literal,)) {
                Ok(number) => number,
                Err(_) => return Ok(None), // over Python's digit limit: the checked path says so
            },
            Value::Float(number) => PyFloat::new(py, *number).into_any(),
            Value::Str(text) => PyString::new(py, text).into_any(),
            Value::Array(items) => {
                let list = PyList::empty(py);
                for item in items {
                    let Some(item) = self.json(item)? else {
                        return Ok(None);
                    };
                    list.append(item)?;
                }
                list.into_any()
            }
            Value::Object(members) => {
                let dict = PyDict::new(py);
                for (key, item) in members {
                    let Some(item) = self.json(item)? else {
                        return Ok(None);
                    };
                    dict.set_item(PyString::new(py, key), item)?;
                }
                dict.into_any()
            }
        }))
    }
}
