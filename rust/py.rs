//! The only file that knows PyO3: converts Python messages to the core's view at the edge,
//! runs the core, and turns its errors into the exceptions the pure-Python reference raises.

use crate::error::CoreError;
use crate::model::{Item, Kind, MessageInfo, Source};
use crate::protocol::Violation;
use crate::tokens::{count_text, count_utf8_bytes as count_utf8};
use crate::window::{self, CutBy, WindowOptions};
use crate::{protocol, turns};
use numpy::PyArray1;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PySequence, PyString, PyTuple};
use std::borrow::Borrow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

const MESSAGE_OVERHEAD: u64 = 4;
const TOOL_CALL_OVERHEAD: u64 = 3;
const MEDIA_PART_TOKENS: u64 = 85;
const MISSING_TEXT: &str = "tool result missing";

/// The Python classes the binding needs, imported once.
struct Classes {
    message: Py<PyAny>,
    text_part: Py<PyAny>,
    tool_message: Py<PyAny>,
    invalid_argument: Py<PyAny>,
    invalid_message_type: Py<PyAny>,
    object_setattr: Py<PyAny>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let messages = py.import("agentctx_fast.messages")?;
        let errors = py.import("agentctx_fast.errors")?;
        Ok(Classes {
            message: messages.getattr("Message")?.unbind(),
            text_part: messages.getattr("TextPart")?.unbind(),
            tool_message: messages.getattr("ToolMessage")?.unbind(),
            invalid_argument: errors.getattr("InvalidArgumentError")?.unbind(),
            invalid_message_type: errors.getattr("InvalidMessageTypeError")?.unbind(),
            object_setattr: py
                .import("builtins")?
                .getattr("object")?
                .getattr("__setattr__")?
                .unbind(),
        })
    })
}

fn raise(py: Python<'_>, class: &Py<PyAny>, message: String) -> PyErr {
    match class.bind(py).call1((message,)) {
        Ok(instance) => PyErr::from_value(instance),
        Err(error) => error,
    }
}

/// Converts a core error into the exception the reference raises, with the same text.
struct Failure(PyErr);

impl From<PyErr> for Failure {
    fn from(error: PyErr) -> Self {
        Failure(error)
    }
}

impl From<CoreError> for Failure {
    fn from(error: CoreError) -> Self {
        Python::attach(|py| {
            let class = match classes(py) {
                Ok(classes) => classes,
                Err(error) => return Failure(error),
            };
            let target = match error {
                CoreError::NotAMessage { .. } => &class.invalid_message_type,
                CoreError::NoUserMessage => &class.invalid_argument,
            };
            Failure(raise(py, target, error.to_string()))
        })
    }
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> Self {
        failure.0
    }
}

fn type_name(object: &Bound<'_, PyAny>) -> String {
    object
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

fn text_of(object: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<u64> {
    let value = object.getattr(name)?;
    if value.is_none() {
        return Ok(0);
    }
    count_str(value.cast::<PyString>().map_err(PyErr::from)?)
}

/// Tokens of a Python str; one with lone surrogates is counted from its surrogatepass bytes,
/// as the reference does.
fn count_str(text: &Bound<'_, PyString>) -> PyResult<u64> {
    match text.to_str() {
        Ok(s) => Ok(count_text(s)),
        Err(_) => {
            let encoded =
                text.call_method1(intern!(text.py(), "encode"), ("utf-8", "surrogatepass"))?;
            Ok(count_utf8(
                encoded.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes(),
            ))
        }
    }
}

/// Heuristic tokens of one message; the formula of `_reference/message_tokens.py`.
fn heuristic_tokens(py: Python<'_>, object: &Bound<'_, PyAny>, kind: Kind) -> PyResult<u64> {
    let text = intern!(py, "text");
    Ok(match kind {
        Kind::User => {
            let content = object.getattr(intern!(py, "content"))?;
            if let Ok(s) = content.cast::<PyString>() {
                MESSAGE_OVERHEAD + count_str(s)?
            } else {
                let text_part = classes(py)?.text_part.bind(py);
                let mut tokens = MESSAGE_OVERHEAD;
                for part in content.try_iter()? {
                    let part = part?;
                    tokens += if part.is_instance(text_part)? {
                        text_of(&part, text)?
                    } else {
                        MEDIA_PART_TOKENS
                    };
                }
                tokens
            }
        }
        Kind::Ai => {
            let mut tokens = MESSAGE_OVERHEAD + text_of(object, text)?;
            for call in object.getattr(intern!(py, "tool_calls"))?.try_iter()? {
                let call = call?;
                tokens += TOOL_CALL_OVERHEAD
                    + text_of(&call, intern!(py, "name"))?
                    + text_of(&call, intern!(py, "arguments"))?;
            }
            tokens
        }
        Kind::Tool | Kind::System => MESSAGE_OVERHEAD + text_of(object, text)?,
        Kind::Action | Kind::Form => 0,
    })
}

fn optional_str(value: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if value.is_none() {
        Ok(None)
    } else {
        Ok(Some(
            value
                .cast::<PyString>()
                .map_err(PyErr::from)?
                .to_cow()?
                .into_owned(),
        ))
    }
}

fn read_info(py: Python<'_>, object: &Bound<'_, PyAny>) -> PyResult<Option<(MessageInfo, Kind)>> {
    if !object.is_instance(classes(py)?.message.bind(py))? {
        return Ok(None);
    }
    let code: i64 = object.getattr(intern!(py, "_kind"))?.extract()?;
    let kind = Kind::from_code(code)
        .ok_or_else(|| PyTypeError::new_err(format!("unknown message kind {code}")))?;
    let message_id = object.getattr(intern!(py, "message_id"))?;
    let mut info = MessageInfo::new(
        kind,
        &message_id
            .cast::<PyString>()
            .map_err(PyErr::from)?
            .to_cow()?,
    );
    info.turn_id = optional_str(&object.getattr(intern!(py, "turn_id"))?)?;
    match kind {
        Kind::Ai => {
            let text = object.getattr(intern!(py, "text"))?;
            let has_text = !text.is_none() && text.len()? > 0;
            for call in object.getattr(intern!(py, "tool_calls"))?.try_iter()? {
                let id = call?.getattr(intern!(py, "id"))?;
                info.call_ids.push(
                    id.cast::<PyString>()
                        .map_err(PyErr::from)?
                        .to_cow()?
                        .into_owned(),
                );
            }
            info.final_text = has_text && info.call_ids.is_empty();
        }
        Kind::Tool => {
            let id = object.getattr(intern!(py, "tool_call_id"))?;
            info.tool_call_id = id
                .cast::<PyString>()
                .map_err(PyErr::from)?
                .to_cow()?
                .into_owned();
        }
        _ => {}
    }
    Ok(Some((info, kind)))
}

/// What the core knows of one message, computed once and kept on the message object (its
/// `_core` slot), so later windows over the same objects read it without any attribute lookup
/// beyond one slot. Messages are immutable, so it never goes stale.
#[pyclass(frozen, module = "agentctx_fast._native")]
#[repr(C)]
struct MessageCore {
    /// Inline, so reading a cached core touches one object.
    info: MessageInfo,
    /// Heuristic tokens, `u64::MAX` until first counted.
    tokens: AtomicU64,
}

#[pymethods]
impl MessageCore {
    /// Copies and pickles of a message drop the cache; it is rebuilt on first use.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, ())> {
        Ok((py.import("builtins")?.getattr("dict")?, ()))
    }
    fn __copy__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __deepcopy__(slf: Py<Self>, _memo: &Bound<'_, PyAny>) -> Py<Self> {
        slf
    }
}

/// Reads the `_core` slot of the message classes straight from the object, as the slot's
/// member descriptor does, skipping the attribute lookup; about a tenth of a window's time.
///
/// Only instances whose exact type is one of the library's message classes are read this
/// way: every one of them has `Message`'s layout and resolves `_core` to `Message`'s slot.
struct SlotReader {
    /// The classes' addresses; 0 (no class) where one redefines `_core`.
    types: [usize; MESSAGE_CLASSES.len()],
    /// The classes themselves, kept alive so no other type can ever take their addresses.
    _classes: Vec<Py<PyAny>>,
    offset: isize,
    core_type: usize,
}

static SLOT_READER: PyOnceLock<Option<SlotReader>> = PyOnceLock::new();

impl SlotReader {
    /// `None` when the slot is not a plain object member (then every read takes getattr).
    fn new(py: Python<'_>) -> PyResult<Option<SlotReader>> {
        let messages = py.import("agentctx_fast.messages")?;
        let Some(offset) = member_offset(&messages.getattr("Message")?, "_core")? else {
            return Ok(None);
        };
        let mut types = [0; MESSAGE_CLASSES.len()];
        let mut classes = Vec::new();
        for (address, name) in types.iter_mut().zip(MESSAGE_CLASSES) {
            let class = messages.getattr(name)?;
            // A class that defined the name again would not read the base slot.
            let mut owners = 0;
            for owner in class.getattr("__mro__")?.try_iter()? {
                owners += usize::from(owner?.getattr("__dict__")?.contains("_core")?);
            }
            if owners == 1 {
                *address = class.as_ptr() as usize;
            }
            classes.push(class.unbind());
        }
        Ok(Some(SlotReader {
            types,
            offset,
            core_type: py.get_type::<MessageCore>().as_ptr() as usize,
            _classes: classes,
        }))
    }

    /// The message's cached core, when `object` is an exact library message that has one.
    #[inline]
    fn read<'py>(&self, object: &Bound<'py, PyAny>) -> Option<Bound<'py, MessageCore>> {
        let pointer = object.as_ptr();
        // SAFETY: `pointer` is a live object; its exact type is one of `types`, every one of
        // which has the object member `_core` at `offset`, so the read is of an initialised
        // PyObject pointer (or NULL when unset). The value's type is checked before the cast.
        unsafe {
            if !self.types.contains(&(ffi::Py_TYPE(pointer) as usize)) {
                return None;
            }
            let value = *pointer
                .cast::<u8>()
                .offset(self.offset)
                .cast::<*mut ffi::PyObject>();
            if value.is_null() || ffi::Py_TYPE(value) as usize != self.core_type {
                return None;
            }
            Some(Bound::from_borrowed_ptr(object.py(), value).cast_into_unchecked())
        }
    }
}

/// Offset of `class`'s own `__slots__` entry `name` in its instances, when it is a plain
/// object member (what `__slots__` makes); `None` for anything else.
fn member_offset(class: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<isize>> {
    let Some(descriptor) = class.getattr("__dict__")?.get_item(name).ok() else {
        return Ok(None);
    };
    let member_type = std::ptr::addr_of_mut!(ffi::PyMemberDescr_Type);
    // SAFETY: the descriptor's exact type is checked before it is read as a member descriptor;
    // its PyMemberDef lives as long as the class, and the class is alive here.
    unsafe {
        let pointer = descriptor.as_ptr();
        if ffi::Py_TYPE(pointer) != member_type {
            return Ok(None);
        }
        let descriptor = &*pointer.cast::<ffi::PyMemberDescrObject>();
        let member = descriptor.d_member;
        let ok = descriptor.d_common.d_type.cast::<ffi::PyObject>() == class.as_ptr()
            && !member.is_null()
            && (*member).type_code == ffi::Py_T_OBJECT_EX
            && (*member).flags & ffi::Py_READONLY == 0
            && (*member).offset >= std::mem::size_of::<ffi::PyObject>() as isize;
        Ok(ok.then(|| (*member).offset))
    }
}

/// The concrete message classes whose `_core` slot is read directly.
const MESSAGE_CLASSES: [&str; 6] = [
    "SystemMessage",
    "UserMessage",
    "AiMessage",
    "ToolMessage",
    "AgentActionMessage",
    "AgentFormMessage",
];

/// The cached core of a message, creating it on first sight; `None` for a non-message.
fn core_of<'py>(
    py: Python<'py>,
    object: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, MessageCore>>> {
    core_named(py, object, intern!(py, "_core"))
}

/// [`core_of`] with the slot name already interned, for loops over whole histories: a cached
/// core costs one attribute read and one type check.
#[inline]
fn core_named<'py>(
    py: Python<'py>,
    object: &Bound<'py, PyAny>,
    slot: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, MessageCore>>> {
    if let Some(Some(reader)) = SLOT_READER.get(py) {
        if let Some(core) = reader.read(object) {
            return Ok(Some(core));
        }
    }
    core_by_name(py, object, slot)
}

/// [`core_named`] for anything but a library message with its core cached.
#[cold]
#[inline(never)]
fn core_by_name<'py>(
    py: Python<'py>,
    object: &Bound<'py, PyAny>,
    slot: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, MessageCore>>> {
    if let Some(reader) = SLOT_READER.get_or_try_init(py, || SlotReader::new(py))? {
        if let Some(core) = reader.read(object) {
            return Ok(Some(core));
        }
    }
    if let Ok(Some(cached)) = object.getattr_opt(slot) {
        if let Ok(core) = cached.cast_into::<MessageCore>() {
            return Ok(Some(core));
        }
    }
    let Some((info, _)) = read_info(py, object)? else {
        return Ok(None);
    };
    let core = Bound::new(
        py,
        MessageCore {
            info,
            tokens: AtomicU64::new(u64::MAX),
        },
    )?;
    // Frozen dataclasses refuse setattr; object.__setattr__ writes the slot directly.
    classes(py)?
        .object_setattr
        .bind(py)
        .call1((object, slot, &core))?;
    Ok(Some(core))
}

/// A message's cached core, as the core crate reads it: cloning it is a reference count.
#[derive(Clone)]
struct CoreRef<'py>(Bound<'py, MessageCore>);

impl Borrow<MessageInfo> for CoreRef<'_> {
    fn borrow(&self) -> &MessageInfo {
        &self.0.get().info
    }
}

/// Streams the cores of `messages[..end]` into `sink`, each message read exactly once, in
/// order; the first non-message is `CoreError::NotAMessage`, as in the reference.
///
/// The work runs while each message is in cache, interleaved with reading the Python objects;
/// that reading is most of the cost, and it needs the GIL, so there is no separate pass worth
/// detaching for.
fn stream_cores<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    end: Option<usize>,
    mut sink: impl FnMut(&CoreRef<'py>),
) -> Result<(), Failure> {
    let seq = sequence(py, messages)?;
    let len = seq.len()?;
    let end = end.map_or(len, |end| end.min(len));
    let slot = intern!(py, "_core");
    for index in 0..end {
        let object = seq.get(index)?;
        match core_named(py, &object, slot)? {
            Some(core) => sink(&CoreRef(core)),
            None => {
                return Err(CoreError::NotAMessage {
                    index,
                    type_name: type_name(&object),
                }
                .into())
            }
        }
    }
    Ok(())
}

/// Heuristic tokens of a message when they were counted before.
fn known_tokens(core: &MessageCore) -> Option<u64> {
    let known = core.tokens.load(Ordering::Relaxed);
    (known != u64::MAX).then_some(known)
}

/// Heuristic tokens of a message, counted once per object.
fn cached_tokens(py: Python<'_>, object: &Bound<'_, PyAny>, core: &MessageCore) -> PyResult<u64> {
    if let Some(known) = known_tokens(core) {
        return Ok(known);
    }
    let tokens = heuristic_tokens(py, object, core.info.kind)?;
    core.tokens.store(tokens, Ordering::Relaxed);
    Ok(tokens)
}

/// A message's cached core, borrowed from the `Reads` that keeps it alive for the whole
/// window: copying it, holding it in a turn or an open call costs no reference count.
#[derive(Clone, Copy)]
struct CoreView<'a>(&'a MessageCore);

impl Borrow<MessageInfo> for CoreView<'_> {
    fn borrow(&self) -> &MessageInfo {
        &self.0.info
    }
}

/// A message a window read and its core, both kept alive by `Reads` for `'a`.
#[derive(Clone, Copy)]
struct Seen<'a> {
    object: *mut ffi::PyObject,
    core: &'a MessageCore,
}

impl Seen<'_> {
    fn object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        // SAFETY: `Reads` holds a strong reference to the object for as long as `self` lives.
        unsafe { Bound::from_borrowed_ptr(py, self.object) }
    }
}

/// Every message a window read, with its core, owned until the window is built. Values are
/// only ever added, so what `hold` hands out stays valid while the `Reads` lives.
struct Reads<'py> {
    held: RefCell<Vec<(Bound<'py, PyAny>, Bound<'py, MessageCore>)>>,
}

impl<'py> Reads<'py> {
    fn with_capacity(capacity: usize) -> Self {
        Reads {
            held: RefCell::new(Vec::with_capacity(capacity)),
        }
    }

    fn hold(&self, object: Bound<'py, PyAny>, core: Bound<'py, MessageCore>) -> Seen<'_> {
        let core_ref: *const MessageCore = core.get();
        let seen = Seen {
            object: object.as_ptr(),
            // SAFETY: the core is a Python object on the heap, kept alive by the reference
            // pushed below until `self` drops, and never mutated except through atomics; moving
            // the `Bound` into the vector does not move the object it points to.
            core: unsafe { &*core_ref },
        };
        self.held.borrow_mut().push((object, core));
        seen
    }
}

/// A Python sequence of messages, read lazily by index.
struct PySource<'a, 'py> {
    py: Python<'py>,
    seq: Items<'py>,
    len: usize,
    estimator: Option<Bound<'py, PyAny>>,
    system: Option<Bound<'py, PyAny>>,
    statuses: Option<Bound<'py, PyAny>>,
    completed: Option<Bound<'py, PyAny>>,
    synthetic: HashMap<(usize, usize), Bound<'py, PyAny>>,
    reads: &'a Reads<'py>,
    /// The tail read so far, by distance from the end (the backward scan reads it in that
    /// order): a window looks each message up several times (scan, turn, tokens, output), so
    /// the hit must be one bounds check.
    tail: Vec<Seen<'a>>,
}

/// `messages`, read by index: an exact list or tuple straight from its item array, any other
/// sequence through `__getitem__`.
struct Items<'py> {
    seq: Bound<'py, PySequence>,
    list: Option<Bound<'py, PyList>>,
    tuple: Option<Bound<'py, PyTuple>>,
}

impl<'py> Items<'py> {
    fn len(&self) -> PyResult<usize> {
        self.seq.len()
    }

    #[inline]
    fn get(&self, index: usize) -> PyResult<Bound<'py, PyAny>> {
        if let Some(list) = &self.list {
            // A callback may have shrunk the list since its length was read: check again.
            if index < list.len() {
                // SAFETY: `index` is within the list's current length.
                return Ok(unsafe { list.get_item_unchecked(index) });
            }
        } else if let Some(tuple) = &self.tuple {
            if index < tuple.len() {
                // SAFETY: `index` is within the tuple's length.
                return Ok(unsafe { tuple.get_item_unchecked(index) });
            }
        }
        self.seq.get_item(index)
    }
}

/// `messages` as a sequence, or the reference's error for anything else.
fn sequence<'py>(py: Python<'py>, messages: &Bound<'py, PyAny>) -> Result<Items<'py>, Failure> {
    match messages.cast::<PySequence>() {
        Ok(seq) if !messages.is_instance_of::<pyo3::types::PyDict>() => Ok(Items {
            seq: seq.clone(),
            list: messages.cast_exact::<PyList>().ok().cloned(),
            tuple: messages.cast_exact::<PyTuple>().ok().cloned(),
        }),
        _ => Err(Failure(raise(
            py,
            &classes(py)?.invalid_message_type,
            format!(
                "messages must be a sequence of Message, got {}",
                type_name(messages)
            ),
        ))),
    }
}

impl<'a, 'py> PySource<'a, 'py> {
    fn new(
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        reads: &'a Reads<'py>,
    ) -> Result<PySource<'a, 'py>, Failure> {
        let seq = sequence(py, messages)?;
        let len = seq.len()?;
        Ok(PySource {
            py,
            seq,
            len,
            estimator: None,
            system: None,
            statuses: None,
            completed: None,
            synthetic: HashMap::new(),
            reads,
            tail: Vec::new(),
        })
    }

    fn object(&self, index: usize) -> PyResult<Bound<'py, PyAny>> {
        self.seq.get(index)
    }

    /// `messages[index]` and its core, read once: a window reads the tail backwards, then
    /// reads its turns, their tokens and their objects again.
    #[inline]
    fn read(&mut self, index: usize) -> Result<Seen<'a>, Failure> {
        let from_end = self.len.checked_sub(index + 1);
        match from_end.and_then(|back| self.tail.get(back)) {
            Some(read) => Ok(*read),
            None => self.read_new(index, from_end),
        }
    }

    #[cold]
    #[inline(never)]
    fn read_new(&mut self, index: usize, from_end: Option<usize>) -> Result<Seen<'a>, Failure> {
        let object = self.object(index)?;
        let Some(core) = core_of(self.py, &object)? else {
            return Err(CoreError::NotAMessage {
                index,
                type_name: type_name(&object),
            }
            .into());
        };
        let seen = self.reads.hold(object, core);
        if from_end == Some(self.tail.len()) {
            self.tail.push(seen);
        }
        Ok(seen)
    }

    #[inline]
    fn core(&mut self, index: usize) -> Result<CoreView<'a>, Failure> {
        Ok(CoreView(self.read(index)?.core))
    }

    #[inline]
    fn materialize(&mut self, item: Item) -> Result<Bound<'py, PyAny>, Failure> {
        match item {
            Item::Original(index) => Ok(self.read(index)?.object(self.py)),
            Item::MissingResult { caller, call } => self.missing_result(caller, call),
        }
    }

    /// The synthetic result closing call `call` of the AI message at `caller`, made once.
    #[cold]
    #[inline(never)]
    fn missing_result(&mut self, caller: usize, call: usize) -> Result<Bound<'py, PyAny>, Failure> {
        if let Some(existing) = self.synthetic.get(&(caller, call)) {
            return Ok(existing.clone());
        }
        let py = self.py;
        let ai = self.object(caller)?;
        let tool_call = ai.getattr(intern!(py, "tool_calls"))?.get_item(call)?;
        let call_id = tool_call.getattr(intern!(py, "id"))?;
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("tool_name", tool_call.getattr(intern!(py, "name"))?)?;
        kwargs.set_item("is_error", true)?;
        kwargs.set_item(
            "message_id",
            format!(
                "{}:missing",
                call_id.cast::<PyString>().map_err(PyErr::from)?.to_cow()?
            ),
        )?;
        kwargs.set_item("turn_id", ai.getattr(intern!(py, "turn_id"))?)?;
        let message = classes(py)?
            .tool_message
            .bind(py)
            .call((call_id, MISSING_TEXT), Some(&kwargs))?;
        self.synthetic.insert((caller, call), message.clone());
        Ok(message)
    }
}

impl<'a, 'py> Source for PySource<'a, 'py> {
    type Error = Failure;
    type Message = CoreView<'a>;

    fn len(&self) -> usize {
        self.len
    }

    fn get(&mut self, index: usize) -> Result<CoreView<'a>, Failure> {
        self.core(index)
    }

    fn tokens(&mut self, items: &[Item]) -> Result<u64, Failure> {
        match self.estimator.clone() {
            Some(estimator) => {
                let mut objects = Vec::with_capacity(items.len());
                for item in items {
                    objects.push(self.materialize(*item)?);
                }
                let list = PyList::new(self.py, objects)?;
                Ok(saturating(&estimator.call1((list,))?, u64::MAX)?)
            }
            None => {
                let mut total = 0;
                for item in items {
                    total += match item {
                        Item::Original(index) => {
                            let core = self.core(*index)?;
                            match known_tokens(core.0) {
                                Some(tokens) => tokens,
                                None => {
                                    let object = self.read(*index)?.object(self.py);
                                    cached_tokens(self.py, &object, core.0)?
                                }
                            }
                        }
                        Item::MissingResult { .. } => MESSAGE_OVERHEAD + count_text(MISSING_TEXT),
                    };
                }
                Ok(total)
            }
        }
    }

    fn system_tokens(&mut self) -> Result<u64, Failure> {
        let Some(system) = self.system.clone() else {
            return Ok(0);
        };
        match self.estimator.clone() {
            Some(estimator) => {
                let list = PyList::new(self.py, [system])?;
                Ok(saturating(&estimator.call1((list,))?, u64::MAX)?)
            }
            // Agents pass the same system message every call: its count is kept on its core.
            None => match core_of(self.py, &system)? {
                Some(core) => Ok(cached_tokens(self.py, &system, core.get())?),
                None => Ok(heuristic_tokens(self.py, &system, Kind::System)?),
            },
        }
    }

    fn recorded_completed(&mut self, turn_id: &str) -> Result<Option<bool>, Failure> {
        let (Some(statuses), Some(completed)) = (&self.statuses, &self.completed) else {
            return Ok(None);
        };
        if !statuses.contains(turn_id)? {
            return Ok(None);
        }
        Ok(Some(statuses.get_item(turn_id)?.eq(completed)?))
    }
}

fn violation_tuple<'py>(py: Python<'py>, v: &Violation) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            v.kind.name(),
            v.message_id.as_str(),
            v.tool_call_id.as_str(),
        ],
    )
}

#[pyfunction]
fn validate<'py>(py: Python<'py>, messages: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let mut validator = protocol::Validator::new();
    stream_cores(py, messages, None, |core| validator.push(core))?;
    let violations = validator.finish();
    let tuples: PyResult<Vec<_>> = violations.iter().map(|v| violation_tuple(py, v)).collect();
    PyList::new(py, tuples?)
}

/// Turn starts, ends and inferred completion, as arrays.
type Segments<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<bool>>,
);

#[pyfunction]
fn segment<'py>(py: Python<'py>, messages: &Bound<'py, PyAny>) -> PyResult<Segments<'py>> {
    let mut segmenter = turns::Segmenter::new();
    stream_cores(py, messages, None, |core| segmenter.push(core))?;
    let turns = segmenter.finish();
    let mut starts = Vec::with_capacity(turns.len());
    let mut ends = Vec::with_capacity(turns.len());
    let mut completed = Vec::with_capacity(turns.len());
    for (start, end, done) in turns {
        starts.push(start as i64);
        ends.push(end as i64);
        completed.push(done);
    }
    Ok((
        PyArray1::from_vec(py, starts),
        PyArray1::from_vec(py, ends),
        PyArray1::from_vec(py, completed),
    ))
}

#[pyfunction]
fn count_turns(py: Python<'_>, messages: &Bound<'_, PyAny>, end: usize) -> PyResult<usize> {
    let mut starts = turns::TurnStarts::new();
    let mut count = 0;
    stream_cores(py, messages, Some(end), |core| {
        count += usize::from(starts.push(core));
    })?;
    Ok(count)
}

#[pyfunction]
fn message_tokens<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let seq = sequence(py, messages)?;
    let len = seq.len()?;
    let mut counts = Vec::with_capacity(len);
    let slot = intern!(py, "_core");
    for index in 0..len {
        let object = seq.get(index)?;
        let Some(core) = core_named(py, &object, slot)? else {
            let error = CoreError::NotAMessage {
                index,
                type_name: type_name(&object),
            };
            return Err(Failure::from(error).into());
        };
        counts.push(cached_tokens(py, &object, core.get())? as i64);
    }
    Ok(PyArray1::from_vec(py, counts))
}

/// A limit or an estimator's count (an int >= 0, checked by the caller) as the core holds it:
/// one past the core's range is `max`. No history reaches it, so a limit that large gives the
/// window the reference builds with the exact int.
fn saturating<T>(value: &Bound<'_, PyAny>, max: T) -> PyResult<T>
where
    T: for<'a, 'py> FromPyObject<'a, 'py, Error = PyErr>,
{
    match value.extract::<T>() {
        Err(error)
            if error.is_instance_of::<pyo3::exceptions::PyOverflowError>(value.py())
                && value.gt(0)? =>
        {
            Ok(max)
        }
        other => other,
    }
}

/// What `select` hands the caller besides the messages: how the window was chosen.
struct Chosen<'py> {
    messages: Bound<'py, PyList>,
    has_system: bool,
    window: window::Window,
}

/// The window's options as the core takes them, and the Python objects it consults.
struct Request<'py> {
    system: Option<Bound<'py, PyAny>>,
    use_leading_system: bool,
    options: WindowOptions,
    count_tokens: Option<Bound<'py, PyAny>>,
    turn_statuses: Option<Bound<'py, PyAny>>,
    completed: Bound<'py, PyAny>,
}

fn choose<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    request: Request<'py>,
) -> Result<Chosen<'py>, Failure> {
    // A default window reads about fifty messages of the tail.
    let reads = Reads::with_capacity(64);
    let mut source = PySource::new(py, messages, &reads)?;
    source.tail.reserve(64);
    source.system = request.system;
    if request.use_leading_system {
        source.system = match window::leading_system(&mut source)? {
            Some(index) => Some(source.object(index)?),
            None => None,
        };
    }
    source.estimator = request.count_tokens;
    source.statuses = request.turn_statuses;
    source.completed = Some(request.completed);
    let options = WindowOptions {
        has_system: source.system.is_some(),
        ..request.options
    };
    let result = window::select(&mut source, &options)?;
    // Every message of the window, made before the list exists: making a synthetic result runs
    // Python code, which must never see a list that is not full.
    let mut objects = Vec::with_capacity(result.items.len() + 1);
    objects.extend(source.system.clone());
    for item in &result.items {
        objects.push(source.materialize(*item)?);
    }
    let messages = new_list(py, objects)?;
    Ok(Chosen {
        messages,
        has_system: options.has_system,
        window: result,
    })
}

/// A list of `objects`, filled in place (no Python code runs while it is partly filled).
fn new_list<'py>(
    py: Python<'py>,
    objects: Vec<Bound<'py, PyAny>>,
) -> Result<Bound<'py, PyList>, Failure> {
    // SAFETY: PyList_New returns a list of `len` NULL items (or NULL with an exception set);
    // each index below `len` is then set once with an owned reference, from values that already
    // exist, so nothing can observe the list before it is full.
    unsafe {
        let list = ffi::PyList_New(objects.len() as ffi::Py_ssize_t);
        if list.is_null() {
            return Err(PyErr::fetch(py).into());
        }
        for (index, object) in objects.into_iter().enumerate() {
            ffi::PyList_SET_ITEM(list, index as ffi::Py_ssize_t, object.into_ptr());
        }
        Ok(Bound::from_owned_ptr(py, list).cast_into_unchecked::<PyList>())
    }
}

/// The `cut_by` strings, made once (a window that names its limit allocates nothing for it).
static CUT_NAMES: PyOnceLock<[Py<PyString>; 3]> = PyOnceLock::new();

fn cut_by_name(py: Python<'_>, cut_by: Option<CutBy>) -> Bound<'_, PyAny> {
    match cut_by {
        Some(cut) => {
            let names = CUT_NAMES.get_or_init(py, || {
                [CutBy::Turns, CutBy::Messages, CutBy::Tokens]
                    .map(|cut| PyString::intern(py, cut.name()).unbind())
            });
            names[cut as usize].bind(py).clone().into_any()
        }
        None => py.None().into_bound(py),
    }
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (messages, system, use_leading_system, max_attached_turns, max_attached_messages, compact_completed_tool_turns, compression_keep_recent_turns, max_attached_tokens, count_tokens, turn_statuses, completed))]
fn select<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    system: Option<Bound<'py, PyAny>>,
    use_leading_system: bool,
    max_attached_turns: &Bound<'py, PyAny>,
    max_attached_messages: &Bound<'py, PyAny>,
    compact_completed_tool_turns: bool,
    compression_keep_recent_turns: &Bound<'py, PyAny>,
    max_attached_tokens: Option<Bound<'py, PyAny>>,
    count_tokens: Option<Bound<'py, PyAny>>,
    turn_statuses: Option<Bound<'py, PyAny>>,
    completed: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let request = Request {
        system,
        use_leading_system,
        options: WindowOptions {
            max_attached_turns: saturating(max_attached_turns, usize::MAX)?,
            max_attached_messages: saturating(max_attached_messages, usize::MAX)?,
            compact_completed_tool_turns,
            compression_keep_recent_turns: saturating(compression_keep_recent_turns, usize::MAX)?,
            max_attached_tokens: match max_attached_tokens {
                Some(budget) => Some(saturating(&budget, u64::MAX)?),
                None => None,
            },
            has_system: false,
        },
        count_tokens,
        turn_statuses,
        completed,
    };
    let Chosen {
        messages,
        has_system,
        window: result,
    } = choose(py, messages, request)?;
    let repairs: PyResult<Vec<_>> = result
        .repairs
        .iter()
        .map(|v| violation_tuple(py, v))
        .collect();
    let values: [Bound<'py, PyAny>; 11] = [
        messages.into_any(),
        has_system.into_pyobject(py)?.to_owned().into_any(),
        result.older_count.into_pyobject(py)?.into_any(),
        result.older_tokens.into_pyobject(py)?.into_any(),
        result.estimated_tokens.into_pyobject(py)?.into_any(),
        result.attached_turns.into_pyobject(py)?.into_any(),
        result.compacted_turns.into_pyobject(py)?.into_any(),
        cut_by_name(py, result.cut_by),
        PyList::new(py, repairs?)?.into_any(),
        result.seen_history_turns.into_pyobject(py)?.into_any(),
        result.unread_end.into_pyobject(py)?.into_any(),
    ];
    PyTuple::new(py, values)
}

/// The slots of `ContextWindow`, in the order of its `__init__` parameters, then `_dropped`
/// (which `__init__` sets to None).
const WINDOW_FIELDS: [&str; 11] = [
    "messages",
    "estimated_tokens",
    "attached_turns",
    "compacted_turns",
    "cut_by",
    "repairs",
    "_history",
    "_seen_history_turns",
    "_unread_end",
    "_engine",
    "_dropped",
];

/// What `build_window` needs of `agentctx_fast.window`, looked up once.
struct WindowApi {
    /// `ContextWindow`, and the offsets of its slots when it is the plain slotted class
    /// `window.py` defines: then a window is made by writing them, as its `__init__` would,
    /// without running Python code.
    context_window: Py<PyAny>,
    slots: Option<WindowSlots>,
    /// `window._build_checked`: every check and option, for calls off the fast path.
    checked: Py<PyAny>,
    system_message: Py<PyAny>,
    system_type: Py<PyAny>,
    violation: Py<PyAny>,
    completed: Py<PyAny>,
    engine: Py<PyAny>,
}

static WINDOW_API: PyOnceLock<WindowApi> = PyOnceLock::new();

impl WindowApi {
    fn get(py: Python<'_>) -> PyResult<&WindowApi> {
        WINDOW_API.get_or_try_init(py, || {
            let window = py.import("agentctx_fast.window")?;
            let class = window.getattr("ContextWindow")?;
            Ok(WindowApi {
                // A class this code cannot read as plain slots is called instead, whatever
                // made the inspection fail.
                slots: window_slots(&class).ok().flatten(),
                context_window: class.unbind(),
                checked: window.getattr("_build_checked")?.unbind(),
                system_message: window.getattr("_system_message")?.unbind(),
                system_type: py
                    .import("agentctx_fast.messages")?
                    .getattr("SystemMessage")?
                    .unbind(),
                violation: py
                    .import("agentctx_fast.protocol")?
                    .getattr("ProtocolViolation")?
                    .unbind(),
                completed: window.getattr("_COMPLETED")?.unbind(),
                engine: py.import("agentctx_fast._native")?.into_any().unbind(),
            })
        })
    }

    /// A `ContextWindow` holding `values` (in `WINDOW_FIELDS` order).
    fn window<'py>(
        &self,
        py: Python<'py>,
        values: [Bound<'py, PyAny>; 11],
    ) -> PyResult<Bound<'py, PyAny>> {
        let class = self.context_window.bind(py);
        let Some(slots) = self.slots else {
            let [a, b, c, d, e, f, g, h, i, j, _] = values;
            return class.call1((a, b, c, d, e, f, g, h, i, j));
        };
        let type_object = class.as_ptr().cast::<ffi::PyTypeObject>();
        // SAFETY: `window_slots` checked that the class is a plain slotted class whose slots
        // are exactly WINDOW_FIELDS, object members at `offsets` inside its instances. tp_alloc
        // returns a zeroed, tracked instance; each slot then takes one owned reference, as
        // `__init__` would store it. No Python code runs between the allocation and the
        // stores, and a collector passing meanwhile would see empty slots, which it allows.
        unsafe {
            let instance = (slots.alloc)(type_object, 0);
            if instance.is_null() {
                return Err(PyErr::fetch(py));
            }
            for (offset, value) in slots.offsets.into_iter().zip(values) {
                *instance
                    .cast::<u8>()
                    .offset(offset)
                    .cast::<*mut ffi::PyObject>() = value.into_ptr();
            }
            Ok(Bound::from_owned_ptr(py, instance))
        }
    }
}

/// How to make a `ContextWindow` without running its `__init__`: the class's allocator and
/// the offsets of its slots, in `WINDOW_FIELDS` order.
#[derive(Clone, Copy)]
struct WindowSlots {
    alloc: ffi::allocfunc,
    offsets: [isize; 11],
}

/// The allocator and slot offsets of `ContextWindow`, when it is a plain class of exactly
/// those slots (no `__dict__`, no base but object).
fn window_slots(class: &Bound<'_, PyAny>) -> PyResult<Option<WindowSlots>> {
    let py = class.py();
    let Ok(class_type) = class.cast::<pyo3::types::PyType>() else {
        return Ok(None);
    };
    let mut declared: Vec<String> = class.getattr("__slots__")?.extract()?;
    declared.sort();
    let mut expected = WINDOW_FIELDS.map(str::to_owned);
    expected.sort();
    if !class
        .getattr("__bases__")?
        .eq((py.get_type::<pyo3::types::PyAny>(),))?
        || declared != expected
        || class.getattr("__dict__")?.contains("__dict__")?
    {
        return Ok(None);
    }
    // SAFETY: `class_type` is a type object, alive while `class` is.
    let (alloc, basic_size) = unsafe {
        let type_object = &*class_type.as_ptr().cast::<ffi::PyTypeObject>();
        (type_object.tp_alloc, type_object.tp_basicsize)
    };
    let Some(alloc) = alloc else {
        return Ok(None);
    };
    let mut offsets = [0isize; 11];
    for (slot, name) in offsets.iter_mut().zip(WINDOW_FIELDS) {
        match member_offset(class, name)? {
            Some(offset) if offset + (std::mem::size_of::<usize>() as isize) <= basic_size => {
                *slot = offset
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(WindowSlots { alloc, offsets }))
}

/// An option that is an exact int within `T`, or `None` to take the checked path.
fn plain_int<T: for<'a, 'py> FromPyObject<'a, 'py>>(value: &Bound<'_, PyAny>) -> Option<T> {
    if value.is_exact_instance_of::<pyo3::types::PyInt>() {
        value.extract().ok()
    } else {
        None
    }
}

/// `build_window` (SPEC §5): the common call (int limits, no compressor, the heuristic
/// estimator, a dict of statuses) runs here end to end; anything else, errors included, goes
/// through `window._build_checked`, which checks every option and calls `select`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn build_window<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    system: &Bound<'py, PyAny>,
    max_attached_turns: &Bound<'py, PyAny>,
    max_attached_messages: &Bound<'py, PyAny>,
    compact_completed_tool_turns: &Bound<'py, PyAny>,
    compression_keep_recent_turns: &Bound<'py, PyAny>,
    context_compressor: &Bound<'py, PyAny>,
    max_attached_tokens: &Bound<'py, PyAny>,
    token_estimator: &Bound<'py, PyAny>,
    turn_statuses: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let api = WindowApi::get(py)?;
    let system_text = system.is_exact_instance_of::<PyString>();
    let plain = (|| {
        // A str becomes its SystemMessage below, once every other option is known plain:
        // the checked path converts it after checking them, and its errors must come out.
        let system = if system.is_none() || system.is_exact_instance_of::<PyString>() {
            None
        } else if system.get_type().is(api.system_type.bind(py)) {
            Some(system.clone())
        } else {
            return None;
        };
        let compact = compact_completed_tool_turns
            .cast_exact::<pyo3::types::PyBool>()
            .ok()?
            .is_true();
        let plain_options = context_compressor.is_none()
            && token_estimator.is_none()
            && (turn_statuses.is_none()
                || turn_statuses.is_exact_instance_of::<pyo3::types::PyDict>());
        if !plain_options {
            return None;
        }
        let max_attached_tokens = if max_attached_tokens.is_none() {
            None
        } else {
            Some(plain_int::<u64>(max_attached_tokens)?)
        };
        Some(Request {
            use_leading_system: system.is_none() && !system_text,
            system,
            options: WindowOptions {
                max_attached_turns: plain_int(max_attached_turns)?,
                max_attached_messages: plain_int(max_attached_messages)?,
                compact_completed_tool_turns: compact,
                compression_keep_recent_turns: plain_int(compression_keep_recent_turns)?,
                max_attached_tokens,
                has_system: false,
            },
            count_tokens: None,
            turn_statuses: (!turn_statuses.is_none()).then(|| turn_statuses.clone()),
            completed: api.completed.bind(py).clone(),
        })
    })();
    let Some(mut request) = plain else {
        return api.checked.bind(py).call1((
            api.engine.bind(py),
            messages,
            system,
            max_attached_turns,
            max_attached_messages,
            compact_completed_tool_turns,
            compression_keep_recent_turns,
            context_compressor,
            max_attached_tokens,
            token_estimator,
            turn_statuses,
        ));
    };
    if system_text {
        request.system = Some(api.system_message.bind(py).call1((system,))?);
    }
    let Chosen {
        messages: window,
        window: result,
        ..
    } = choose(py, messages, request)?;
    let repairs = PyList::empty(py);
    for v in &result.repairs {
        repairs.append(api.violation.bind(py).call1(violation_tuple(py, v)?)?)?;
    }
    api.window(
        py,
        [
            window.into_any(),
            result.estimated_tokens.into_pyobject(py)?.into_any(),
            result.attached_turns.into_pyobject(py)?.into_any(),
            result.compacted_turns.into_pyobject(py)?.into_any(),
            cut_by_name(py, result.cut_by),
            repairs.into_any(),
            messages.clone(),
            result.seen_history_turns.into_pyobject(py)?.into_any(),
            result.unread_end.into_pyobject(py)?.into_any(),
            api.engine.bind(py).clone(),
            py.None().into_bound(py),
        ],
    )
}

/// Inputs at least this large are counted with the GIL released (below it, detaching costs
/// more than it lets other threads gain).
const DETACH_BYTES: usize = 64 * 1024;

/// The UTF-8 bytes of a str, borrowed from the object; a str with lone surrogates is encoded
/// with `surrogatepass` (WTF-8), which the core counts like the reference does.
enum Text<'a, 'py> {
    Str(&'a str),
    Wtf8(Bound<'py, PyBytes>),
}

impl<'a, 'py> Text<'a, 'py> {
    fn new(text: &'a Bound<'py, PyString>) -> PyResult<Self> {
        match text.to_str() {
            Ok(s) => Ok(Text::Str(s)),
            Err(_) => Ok(Text::Wtf8(
                text.call_method1("encode", ("utf-8", "surrogatepass"))?
                    .cast_into::<PyBytes>()?,
            )),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Text::Str(s) => s.as_bytes(),
            Text::Wtf8(b) => b.as_bytes(),
        }
    }
}

/// Estimated tokens of `text` (the heuristic of `rust/tokens.rs`).
#[pyfunction(name = "count_text")]
fn count_text_py(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<u64> {
    let Ok(text) = text.cast::<PyString>() else {
        let message = format!("count_text needs a str, got {}", type_name(text));
        return Err(raise(py, &classes(py)?.invalid_message_type, message));
    };
    let text = Text::new(text)?;
    let bytes = text.bytes();
    if bytes.len() >= DETACH_BYTES {
        Ok(py.detach(|| count_utf8(bytes)))
    } else {
        Ok(count_utf8(bytes))
    }
}

/// Estimated tokens of every text, as an int64 array.
#[pyfunction]
fn count_texts<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let strings = texts
        .try_iter()?
        .map(|item| Ok(item?.cast_into::<PyString>()?))
        .collect::<PyResult<Vec<_>>>()?;
    let views = strings
        .iter()
        .map(Text::new)
        .collect::<PyResult<Vec<_>>>()?;
    let slices: Vec<&[u8]> = views.iter().map(Text::bytes).collect();
    let count =
        |slices: &[&[u8]]| -> Vec<i64> { slices.iter().map(|b| count_utf8(b) as i64).collect() };
    let total: usize = slices.iter().map(|b| b.len()).sum();
    let counts = if total >= DETACH_BYTES {
        py.detach(|| count(&slices))
    } else {
        count(&slices)
    };
    Ok(PyArray1::from_vec(py, counts))
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_class::<MessageCore>()?;
    module.add_function(wrap_pyfunction!(build_window, module)?)?;
    module.add_function(wrap_pyfunction!(count_text_py, module)?)?;
    module.add_function(wrap_pyfunction!(count_texts, module)?)?;
    module.add_function(wrap_pyfunction!(count_turns, module)?)?;
    module.add_function(wrap_pyfunction!(message_tokens, module)?)?;
    module.add_function(wrap_pyfunction!(segment, module)?)?;
    module.add_function(wrap_pyfunction!(select, module)?)?;
    module.add_function(wrap_pyfunction!(validate, module)?)?;
    Ok(())
}
