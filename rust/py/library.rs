//! The Python classes and values the binding relies on, captured when the extension is
//! imported and checked then; later replacing a module attribute changes nothing here (the
//! pure-Python reference imports the same names once, too).

use crate::model::Kind;
use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyModule, PyString, PyType};
use std::convert::Infallible;

/// The library's message classes by kind, in the order a subclass is matched.
pub const KINDS: [(Kind, &str); 6] = [
    (Kind::System, "SystemMessage"),
    (Kind::User, "UserMessage"),
    (Kind::Ai, "AiMessage"),
    (Kind::Tool, "ToolMessage"),
    (Kind::Action, "AgentActionMessage"),
    (Kind::Form, "AgentFormMessage"),
];

pub struct Library {
    pub message: Py<PyType>,
    pub kinds: [Py<PyType>; 6],
    pub text_part: Py<PyType>,
    pub tool_call: Py<PyType>,
    pub tool_message: Py<PyType>,
    pub sequence: Py<PyAny>,
    pub invalid_argument: Py<PyType>,
    pub invalid_message_type: Py<PyType>,
    pub completed: Py<PyAny>,
    pub index: Py<PyAny>,
    /// Each kind's `_core` slot, in `KINDS` order (a message's own class defines it).
    pub core_slots: [Member; 6],
    pub cut_names: [Py<PyString>; 3],
}

static LIBRARY: PyOnceLock<Library> = PyOnceLock::new();

fn class<'py>(module: &Bound<'py, PyModule>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let value = module.getattr(name)?;
    value.cast_into::<PyType>().map_err(|_| {
        PyImportError::new_err(format!(
            "{}.{name} is not a class",
            module.name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })
}

fn subclass<'py>(
    module: &Bound<'py, PyModule>,
    name: &str,
    base: &Bound<'py, PyType>,
) -> PyResult<Bound<'py, PyType>> {
    let found = class(module, name)?;
    if !found.is_subclass(base)? {
        return Err(PyImportError::new_err(format!(
            "agentctx_fast: {name} does not derive from {}",
            base.name()?
        )));
    }
    Ok(found)
}

impl Library {
    /// Imports and checks everything the binding uses; called once, by the module's init.
    pub fn capture(py: Python<'_>) -> PyResult<()> {
        let messages = py.import("agentctx_fast.core.messages")?;
        let errors = py.import("agentctx_fast.errors")?;
        let types = py.import("agentctx_fast.core.types")?;
        let message = class(&messages, "Message")?;
        let [system, user, ai, tool, action, form] =
            KINDS.map(|(_, name)| subclass(&messages, name, &message));
        let tool = tool?;
        let tool_message = tool.clone().unbind();
        let kinds = [system?, user?, ai?, tool, action?, form?].map(Bound::unbind);
        let base_error = class(&errors, "AgentCtxError")?;
        let turn_status = class(&types, "TurnStatus")?;
        let completed = turn_status.getattr("COMPLETED")?;
        if !completed.is_instance(&turn_status)? {
            return Err(PyImportError::new_err(
                "agentctx_fast: TurnStatus.COMPLETED is not a TurnStatus",
            ));
        }
        let library = Library {
            core_slots: {
                let [a, b, c, d, e, f] = kinds
                    .each_ref()
                    .map(|kind| Member::capture(kind.bind(py), "_core"));
                [a?, b?, c?, d?, e?, f?]
            },
            message: message.unbind(),
            kinds,
            text_part: class(&messages, "TextPart")?.unbind(),
            tool_call: class(&messages, "ToolCall")?.unbind(),
            tool_message,
            sequence: py.import("collections.abc")?.getattr("Sequence")?.unbind(),
            invalid_argument: subclass(&errors, "InvalidArgumentError", &base_error)?.unbind(),
            invalid_message_type: subclass(&errors, "InvalidMessageTypeError", &base_error)?
                .unbind(),
            completed: completed.unbind(),
            index: py.import("operator")?.getattr("index")?.unbind(),
            cut_names: [
                "max_attached_turns",
                "max_attached_messages",
                "max_attached_tokens",
            ]
            .map(|name| PyString::intern(py, name).unbind()),
        };
        // A second import (a re-created module) keeps the first capture: the classes are the
        // same objects for the life of the interpreter.
        let _ = LIBRARY.set(py, library);
        Ok(())
    }

    /// The captured library; an error only if the module's init did not finish.
    pub fn get(py: Python<'_>) -> PyResult<&Library> {
        LIBRARY.get(py).ok_or_else(Library::missing)
    }

    pub fn missing() -> PyErr {
        PyImportError::new_err("agentctx_fast._native did not finish its import")
    }

    /// The kind of a library message class, by identity.
    #[inline]
    pub fn exact_kind(&self, class: &Bound<'_, PyType>) -> Option<Kind> {
        self.kinds
            .iter()
            .zip(KINDS)
            .find(|(known, _)| known.is(class))
            .map(|(_, (kind, _))| kind)
    }

    /// The `_core` slot of messages of `kind`.
    #[inline]
    pub fn core_slot(&self, kind: Kind) -> Option<&Member> {
        KINDS
            .iter()
            .zip(&self.core_slots)
            .find(|((known, _), _)| *known == kind)
            .map(|(_, slot)| slot)
    }
}

/// A count or a token sum as a Python int.
pub fn int<'py, T>(py: Python<'py>, value: T) -> Bound<'py, PyAny>
where
    T: IntoPyObject<'py, Output = Bound<'py, PyInt>, Error = Infallible>,
{
    let Ok(int) = value.into_pyobject(py);
    int.into_any()
}

/// A slot as its class defines it (`Message._core`), read and written
/// through its member descriptor (`Cls.name.__get__(obj)` / `__set__`), whatever a subclass or a
/// later class attribute defines under that name.
pub struct Member {
    get: Py<PyAny>,
    set: Py<PyAny>,
}

impl Member {
    fn capture(class: &Bound<'_, PyType>, name: &str) -> PyResult<Member> {
        let py = class.py();
        let descriptor = class.getattr("__dict__")?.get_item(name)?;
        let member_type = py.import("types")?.getattr("MemberDescriptorType")?;
        if !descriptor.get_type().is(&member_type) {
            return Err(PyImportError::new_err(format!(
                "agentctx_fast: {}.{name} is not a slot",
                class.name()?
            )));
        }
        Ok(Member {
            get: descriptor.getattr("__get__")?.unbind(),
            set: descriptor.getattr("__set__")?.unbind(),
        })
    }

    /// The slot's value on `message` (an AttributeError when unset); a TypeError for an
    /// object of another class.
    pub fn read<'py>(&self, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.get
            .bind(message.py())
            .call1((message, message.get_type()))
    }

    /// Sets the slot on `message` (a TypeError for an object of another class).
    pub fn write(&self, message: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set.bind(message.py()).call1((message, value))?;
        Ok(())
    }
}
