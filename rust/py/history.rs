//! A caller's history as the core's `Source`: read by index, each index at most once, so what
//! a window saw of a message stays what it saw, whatever Python code (a status's `__eq__`, an
//! estimator) does to the list meanwhile. `_reference/turns.py::History` reads the same way;
//! the window's list is made of the messages read, never sliced from the caller's list.

use super::errors::type_name;
use super::library::Library;
use super::message::{core_of, tokens};
use crate::error::{CoreError, Where};
use crate::model::{Item, MessageCore, Source};
use crate::tokens::missing_result_tokens;
use crate::window::{leading_system, missing_result_id, MISSING_RESULT_TEXT};
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use typed_arena::Arena;

/// `messages`, read by index: an exact list or tuple through its own accessor, any other
/// sequence through `__getitem__`. Its length is read once.
pub struct Items<'py> {
    any: Bound<'py, PyAny>,
    list: Option<Bound<'py, PyList>>,
    tuple: Option<Bound<'py, PyTuple>>,
    pub len: usize,
}

impl<'py> Items<'py> {
    #[inline(always)]
    pub fn get(&self, index: usize) -> PyResult<Bound<'py, PyAny>> {
        if let Some(list) = &self.list {
            list.get_item(index)
        } else if let Some(tuple) = &self.tuple {
            tuple.get_item(index)
        } else {
            self.any.get_item(index)
        }
    }
}

/// `messages` as a sequence, or the reference's error for anything else.
pub fn sequence<'py>(library: &Library, messages: &Bound<'py, PyAny>) -> PyResult<Items<'py>> {
    let py = messages.py();
    let list = messages.cast_exact::<PyList>().ok().cloned();
    let tuple = messages.cast_exact::<PyTuple>().ok().cloned();
    if list.is_none() && tuple.is_none() && !messages.is_instance(library.sequence.bind(py))? {
        let type_name = type_name(messages);
        return Err(CoreError::NotASequence { type_name }.into());
    }
    let len = messages.len()?;
    Ok(Items {
        any: messages.clone(),
        list,
        tuple,
        len,
    })
}

/// A message a window read, and its core.
pub struct Read<'py> {
    pub object: Bound<'py, PyAny>,
    pub core: Arc<MessageCore>,
}

/// Where a window keeps what it read, each message once: the map and the turns borrow it.
pub type Reads<'py> = Arena<Read<'py>>;

/// The history of one window: every index read once (a dict of the reads, as
/// `_reference/turns.py::History` keeps), the caller's estimator and statuses.
pub struct History<'a, 'py> {
    pub library: &'a Library,
    pub items: Items<'py>,
    arena: &'a Reads<'py>,
    reads: FxHashMap<usize, &'a Read<'py>>,
    pub system: Option<Bound<'py, PyAny>>,
    pub count_tokens: Option<Bound<'py, PyAny>>,
    pub statuses: Option<Bound<'py, PyAny>>,
    synthetic: FxHashMap<(usize, usize), Bound<'py, PyAny>>,
}

impl<'a, 'py> History<'a, 'py> {
    pub fn new(
        library: &'a Library,
        messages: &Bound<'py, PyAny>,
        arena: &'a Reads<'py>,
    ) -> PyResult<Self> {
        Ok(History {
            library,
            items: sequence(library, messages)?,
            arena,
            // A default window reads about fifty messages.
            reads: FxHashMap::with_capacity_and_hasher(64, Default::default()),
            system: None,
            count_tokens: None,
            statuses: None,
            synthetic: FxHashMap::default(),
        })
    }

    fn py(&self) -> Python<'py> {
        self.items.any.py()
    }

    /// `messages[index]` and its core, read once.
    pub fn read(&mut self, index: usize) -> PyResult<&'a Read<'py>> {
        match self.reads.entry(index) {
            Entry::Occupied(read) => Ok(read.get()),
            Entry::Vacant(slot) => {
                let object = self.items.get(index)?;
                let core = core_of(self.library, &object, Where::Index(index))?;
                Ok(slot.insert(self.arena.alloc(Read { object, core })))
            }
        }
    }

    /// Makes the history's leading system message (if any) the window's `system`, taken from
    /// its read: it comes before the first user message, so before every turn, and is never
    /// an item of the window.
    pub fn take_leading_system(&mut self) -> PyResult<()> {
        self.system = None;
        if let Some(index) = leading_system(self)? {
            let read = self.read(index)?;
            self.system = Some(read.object.clone());
        }
        Ok(())
    }

    /// The message for one item of the window: an original (read once) or a synthetic result.
    fn materialize(&mut self, item: Item) -> PyResult<Bound<'py, PyAny>> {
        match item {
            Item::Original(index) => Ok(self.read(index)?.object.clone()),
            Item::MissingResult { caller, call } => self.missing_result(caller, call),
        }
    }

    /// The window's messages as its list, `system` first then `items`: the synthetic results
    /// are made first (that runs Python code; `synthetic` false says `items` holds none), then
    /// the list is made of the messages read.
    /// Every original item was read (were one not, the window fails with `not_read`, a bug of
    /// this file).
    pub fn into_list(
        mut self,
        items: &[Item],
        system: Option<Bound<'py, PyAny>>,
        synthetic: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        if synthetic {
            for item in items {
                if let Item::MissingResult { caller, call } = *item {
                    self.missing_result(caller, call)?;
                }
            }
        }
        let mut messages = Vec::with_capacity(usize::from(system.is_some()) + items.len());
        messages.extend(system);
        for item in items {
            let message = match *item {
                Item::Original(index) => self.reads.get(&index).map(|read| read.object.clone()),
                Item::MissingResult { caller, call } => {
                    self.synthetic.get(&(caller, call)).cloned()
                }
            };
            messages.push(message.ok_or_else(not_read)?);
        }
        PyList::new(self.py(), messages)
    }

    /// The synthetic result closing call `call` of the AI message at `caller`, made once,
    /// from the caller's core (never from the list again).
    #[cold]
    fn missing_result(&mut self, caller: usize, call: usize) -> PyResult<Bound<'py, PyAny>> {
        if let Some(existing) = self.synthetic.get(&(caller, call)) {
            return Ok(existing.clone());
        }
        let (py, library) = (self.py(), self.library);
        let info = &self.read(caller)?.core.info;
        let (Some(call_id), Some(name)) = (info.call_ids.get(call), info.call_names.get(call))
        else {
            let at = Where::Index(caller).to_string();
            return Err(CoreError::NoSuchCall { at, call }.into());
        };
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "tool_name"), name)?;
        kwargs.set_item(intern!(py, "is_error"), true)?;
        kwargs.set_item(intern!(py, "message_id"), missing_result_id(call_id))?;
        kwargs.set_item(intern!(py, "turn_id"), info.turn_id.as_deref())?;
        let message = library
            .tool_message
            .bind(py)
            .call((call_id, MISSING_RESULT_TEXT), Some(&kwargs))?;
        self.synthetic.insert((caller, call), message.clone());
        Ok(message)
    }

    fn estimate(
        &self,
        estimator: &Bound<'py, PyAny>,
        objects: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<u128> {
        let list = PyList::new(self.py(), objects)?;
        // The shared layer checked the count: an int from 0 to 2**63 - 1.
        Ok(u128::from(estimator.call1((list,))?.extract::<u64>()?))
    }
}

impl<'a> Source for History<'a, '_> {
    type Error = PyErr;
    type Message = &'a MessageCore;

    fn len(&self) -> usize {
        self.items.len
    }

    fn get(&mut self, index: usize) -> PyResult<&'a MessageCore> {
        Ok(&self.read(index)?.core)
    }

    fn tokens(&mut self, items: &[Item]) -> PyResult<u128> {
        if let Some(estimator) = self.count_tokens.clone() {
            let mut objects = Vec::with_capacity(items.len());
            for item in items {
                objects.push(self.materialize(*item)?);
            }
            return self.estimate(&estimator, objects);
        }
        let mut total = 0u128;
        for item in items {
            total += u128::from(match item {
                Item::Original(index) => {
                    let library = self.library;
                    let read = self.read(*index)?;
                    tokens(library, &read.object, &read.core, Where::Index(*index))?
                }
                Item::MissingResult { .. } => missing_result_tokens(),
            });
        }
        Ok(total)
    }

    fn known_tokens(&mut self, turn: &[(usize, &'a MessageCore)]) -> Option<u128> {
        if self.count_tokens.is_some() {
            return None;
        }
        MessageCore::known_sum(turn.iter().map(|(_, message)| *message))
    }

    fn system_tokens(&mut self) -> PyResult<u128> {
        let Some(system) = &self.system else {
            return Ok(0);
        };
        if let Some(estimator) = &self.count_tokens {
            return self.estimate(estimator, vec![system.clone()]);
        }
        // Read again, as the reference reads `view(system, "system")`: Python code that ran
        // since the leading read may have changed the message's kept core.
        let core = core_of(self.library, system, Where::System)?;
        Ok(u128::from(tokens(
            self.library,
            system,
            &core,
            Where::System,
        )?))
    }

    fn recorded_completed(&mut self, turn_id: &str) -> PyResult<Option<bool>> {
        let Some(statuses) = self.statuses.clone() else {
            return Ok(None);
        };
        let py = self.py();
        let key = PyString::new(py, turn_id);
        if !statuses.contains(&key)? {
            return Ok(None);
        }
        let status = statuses.get_item(&key)?;
        Ok(Some(status.eq(self.library.completed.bind(py))?))
    }
}

/// A message the window chose but did not read (a bug of this file).
#[cold]
fn not_read() -> PyErr {
    PyRuntimeError::new_err("agentctx_fast: a window's message was not read")
}
