//! The Python classes and values the binding relies on, captured when the extension is
//! imported and checked then; later replacing a module attribute changes nothing here (the
//! pure-Python reference imports the same names once, too).

use crate::model::Kind;
use pyo3::exceptions::PyImportError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyString, PyTuple, PyType};

/// The library's message classes by kind, in the order a subclass is matched.
pub const KINDS: [(Kind, &str); 6] = [
    (Kind::System, "SystemMessage"),
    (Kind::User, "UserMessage"),
    (Kind::Ai, "AiMessage"),
    (Kind::Tool, "ToolMessage"),
    (Kind::Action, "AgentActionMessage"),
    (Kind::Form, "AgentFormMessage"),
];

/// The slots of a new `ContextWindow`, in the order `_core_types.new_window` sets them.
pub const WINDOW_FIELDS: [&str; 7] = [
    "messages",
    "estimated_tokens",
    "attached_turns",
    "compacted_turns",
    "cut_by",
    "repairs",
    "_unread",
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
    pub window_options: Py<PyType>,
    pub protocol_violation: Py<PyType>,
    pub completed: Py<PyAny>,
    pub object_new: Py<PyAny>,
    /// `(ContextWindow,)`: the arguments of `object.__new__` for a new window, made once.
    pub new_window_args: Py<PyTuple>,
    pub index: Py<PyAny>,
    /// Each kind's `_core` slot, in `KINDS` order: a message's own class defines it, so
    /// reading it from a message of the exact class checks no bases.
    pub core_slots: [Member; 6],
    /// `ContextWindow`'s slots, in `WINDOW_FIELDS` order, written as `new_window` writes them.
    pub window_slots: [Member; 7],
    pub cut_names: [Py<PyString>; 3],
    pub engine: Py<PyModule>,
    /// The ints 0 to `SMALL_INTS - 1` (CPython's own cached objects): a window's counts are
    /// handed out from here without a conversion call.
    pub small_ints: Vec<Py<PyAny>>,
}

/// How many small ints `Library` holds (CPython caches 0 to 256).
const SMALL_INTS: u16 = 257;

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
    pub fn capture(engine: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = engine.py();
        let messages = py.import("agentctx_fast.messages")?;
        let errors = py.import("agentctx_fast.errors")?;
        let types = py.import("agentctx_fast._core_types")?;
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
        let builtins = py.import("builtins")?;
        let context_window = class(&types, "ContextWindow")?;
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
            window_options: class(&types, "WindowOptions")?.unbind(),
            window_slots: {
                let [a, b, c, d, e, f, g] =
                    WINDOW_FIELDS.map(|name| Member::capture(&context_window, name));
                [a?, b?, c?, d?, e?, f?, g?]
            },
            new_window_args: PyTuple::new(py, [&context_window])?.unbind(),
            protocol_violation: class(&types, "ProtocolViolation")?.unbind(),
            completed: completed.unbind(),
            object_new: builtins.getattr("object")?.getattr("__new__")?.unbind(),
            index: py.import("operator")?.getattr("index")?.unbind(),
            cut_names: [
                "max_attached_turns",
                "max_attached_messages",
                "max_attached_tokens",
            ]
            .map(|name| PyString::intern(py, name).unbind()),
            engine: engine.clone().unbind(),
            small_ints: (0..SMALL_INTS)
                .map(|n| Ok(n.into_pyobject(py)?.into_any().unbind()))
                .collect::<PyResult<_>>()?,
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
    pub fn exact_kind(&self, class: *mut ffi::PyTypeObject) -> Option<Kind> {
        self.exact_slot(class).map(|(kind, _)| kind)
    }

    /// The kind of a library message class, by identity, and its `_core` slot. The classes are
    /// compared most frequent first (a tool-heavy history is mostly AI messages, then tool
    /// results, then user messages); they are distinct, so the order changes only how soon
    /// the match is found.
    #[inline]
    pub fn exact_slot(&self, class: *mut ffi::PyTypeObject) -> Option<(Kind, &Member)> {
        let pointer = class.cast::<ffi::PyObject>();
        let [system, user, ai, tool, action, form] = &self.kinds;
        let [system_slot, user_slot, ai_slot, tool_slot, action_slot, form_slot] = &self.core_slots;
        let [(system_kind, _), (user_kind, _), (ai_kind, _), (tool_kind, _), (action_kind, _), (form_kind, _)] =
            KINDS;
        if ai.as_ptr() == pointer {
            Some((ai_kind, ai_slot))
        } else if tool.as_ptr() == pointer {
            Some((tool_kind, tool_slot))
        } else if user.as_ptr() == pointer {
            Some((user_kind, user_slot))
        } else if system.as_ptr() == pointer {
            Some((system_kind, system_slot))
        } else if action.as_ptr() == pointer {
            Some((action_kind, action_slot))
        } else if form.as_ptr() == pointer {
            Some((form_kind, form_slot))
        } else {
            None
        }
    }

    /// `count` as a Python int.
    #[inline]
    pub fn int<'py>(&self, py: Python<'py>, count: usize) -> PyResult<Bound<'py, PyAny>> {
        match self.small_ints.get(count) {
            Some(small) => Ok(small.bind(py).clone()),
            None => big_int(py, count as u128),
        }
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

/// `value` as a Python int: through a signed conversion where it fits, which CPython makes
/// in one step for values below 2**30 (the unsigned one counts digits in a loop).
pub fn big_int(py: Python<'_>, value: u128) -> PyResult<Bound<'_, PyAny>> {
    Ok(match isize::try_from(value) {
        Ok(fits) => fits.into_pyobject(py)?.into_any(),
        Err(_) => value.into_pyobject(py)?.into_any(),
    })
}

/// A slot as its class defines it (`Message._core`, each of `ContextWindow`'s), read and
/// written through its member descriptor (what `Cls.name.__get__(obj)` / `__set__` do), whatever
/// a subclass or a later class attribute defines under that name.
pub struct Member {
    descriptor: Py<PyAny>,
    get: ffi::descrgetfunc,
    set: ffi::descrsetfunc,
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
        // SAFETY: PyType_GetSlot accepts every type since 3.10 and returns the type's own
        // function (or NULL); member descriptors define both slots. The function pointers
        // are those of a static type, alive for the interpreter's life.
        let (get, set) = unsafe {
            let kind = descriptor.get_type().as_type_ptr();
            (
                ffi::PyType_GetSlot(kind, ffi::Py_tp_descr_get),
                ffi::PyType_GetSlot(kind, ffi::Py_tp_descr_set),
            )
        };
        if get.is_null() || set.is_null() {
            return Err(PyImportError::new_err(format!(
                "agentctx_fast: {}.{name} has no descriptor functions",
                class.name()?
            )));
        }
        Ok(Member {
            descriptor: descriptor.unbind(),
            // SAFETY: the slots Py_tp_descr_get / Py_tp_descr_set hold functions of exactly
            // these signatures (descrgetfunc / descrsetfunc).
            get: unsafe { std::mem::transmute::<*mut std::ffi::c_void, ffi::descrgetfunc>(get) },
            set: unsafe { std::mem::transmute::<*mut std::ffi::c_void, ffi::descrsetfunc>(set) },
        })
    }

    /// The slot's value on `message` (an AttributeError when unset); a TypeError for an
    /// object of another class.
    #[inline]
    pub fn read<'py>(&self, message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = message.py();
        // SAFETY: the member descriptor's get function, called as `descr.__get__(obj, type)`
        // is: it checks `message`'s type itself and returns a new reference or NULL with an
        // exception set.
        unsafe {
            let value = (self.get)(
                self.descriptor.as_ptr(),
                message.as_ptr(),
                message.get_type_ptr().cast::<ffi::PyObject>(),
            );
            Bound::from_owned_ptr_or_err(py, value)
        }
    }

    /// Sets the slot on `message`, as `descr.__set__(obj, value)` (a TypeError for an object
    /// of another class).
    #[inline]
    pub fn write(&self, message: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        // SAFETY: the member descriptor's set function checks `message`'s type, takes its own
        // reference to `value` and returns -1 with an exception set on failure.
        let status =
            unsafe { (self.set)(self.descriptor.as_ptr(), message.as_ptr(), value.as_ptr()) };
        if status < 0 {
            Err(PyErr::fetch(message.py()))
        } else {
            Ok(())
        }
    }
}
