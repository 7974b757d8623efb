"""Hostile callers (SPEC §14): each scenario runs in a fresh interpreter on each backend, and
must not crash or hang it, and must give the same windows (or the same error class and
message) on both. The first findings against the layout-reading binding are here, one
scenario each, with others of the same kinds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import native_or_skip

TESTS = Path(__file__).parent
TIMEOUT = 120  # seconds; a scenario takes well under one, so reaching it is a hang

COMMON = """
import sys
from hostile_prelude import show
"""

HISTORY = """
from agentctx_fast import (
    AiMessage, SystemMessage, ToolCall, ToolMessage, TurnStatus, UserMessage, build_window,
)

def history():
    return [
        SystemMessage("You are a support agent.", message_id="s0"),
        UserMessage("Where is ORD-1?", message_id="u1", turn_id="t1"),
        AiMessage(None, (ToolCall("c1", "get_order", '{"id": 1}'),
                         ToolCall("c2", "get_refund", "{}")), message_id="a1", turn_id="t1"),
        ToolMessage("c1", '{"status": "shipped"}', message_id="r1", turn_id="t1"),
        AiMessage("It shipped.", message_id="f1", turn_id="t1"),
        UserMessage("And ORD-2?", message_id="u2", turn_id="t2"),
        AiMessage(None, (ToolCall("c1", "get_order", '{"id": 2}'),), message_id="a2",
                  turn_id="t2"),
        ToolMessage("c1", '{"status": "late"}', message_id="r2", turn_id="t2"),
        AiMessage("It is late.", message_id="f2", turn_id="t2"),
        UserMessage("Thanks. Anything else?", message_id="u3", turn_id="t3"),
    ]
"""

# A property that overrides a dataclass field: its setter lets the frozen __init__ run.
OVERRIDE = """
def override(getter):
    return property(getter, lambda self, value: None)
"""

SCENARIOS: dict[str, str] = {}

# A message class of agentctx_fast.core.messages replaced before the first window (it crashed the
# interpreter): the library keeps the classes it imported; the impostors are not messages.
SCENARIOS["message_class_replaced_before_first_window"] = (
    HISTORY
    + """
import agentctx_fast.core.messages as messages
real = history()

class Lying(type):
    @property
    def __bases__(cls):
        return (messages.Message,)
    @property
    def __mro__(cls):
        return (cls, messages.UserMessage, messages.Message, object)

class FakeUser(dict, metaclass=Lying):
    message_id = "fake"
    turn_id = None
    model_visible = True
    content = "hi"

messages.UserMessage = FakeUser
messages.AiMessage = dict
messages.ToolMessage = FakeUser
show("real", lambda: build_window(real, compact_completed_tool_turns=True))
show("fake", lambda: build_window([*real, FakeUser()]))
show("fake-only", lambda: build_window([FakeUser()]))
show("made-after", lambda: build_window([*real, UserMessage("new", message_id="u9")]))
# Replacing the base class breaks the message classes' own __post_init__ (a synthetic result
# is made here): the same error on both.
messages.Message = object
show("base replaced", lambda: build_window(real))
"""
)

# Classes of agentctx_fast.core.messages, core.types and errors rebound while the package
# imports, after the reference imported its own and while the binding captured its own (the two
# cores took them at different moments: the Rust core refused a real UserMessage, did not see a
# TurnStatus.COMPLETED as completed, raised another error class): both cores know the classes
# the reference imported.
SCENARIOS["classes_rebound_while_the_package_imports"] = (
    """
import enum
swapped = {}

def rebind(frame, event, arg):
    if getattr(arg, "__name__", None) != "capture_library":
        return
    messages = sys.modules["agentctx_fast.core.messages"]
    types = sys.modules["agentctx_fast.core.types"]
    errors = sys.modules["agentctx_fast.errors"]
    if event == "c_call":
        swapped["user"], swapped["status"] = messages.UserMessage, types.TurnStatus
        swapped["error"] = errors.InvalidMessageTypeError
        messages.UserMessage = messages.SystemMessage
        types.TurnStatus = enum.Enum("TurnStatus", ["COMPLETED"])
        errors.InvalidMessageTypeError = type("Impostor", (errors.AgentCtxError,), {})
    elif event in ("c_return", "c_exception"):
        messages.UserMessage, types.TurnStatus = swapped.pop("user"), swapped.pop("status")
        errors.InvalidMessageTypeError = swapped.pop("error")

sys.setprofile(rebind)
import agentctx_fast
sys.setprofile(None)
"""
    + HISTORY
    + """
from agentctx_fast import SystemMessage
show("restored", lambda: UserMessage is not SystemMessage and not swapped)
messages = history()
show("window", lambda: build_window(messages))
show("completed", lambda: build_window(
    messages, compact_completed_tool_turns=True, compression_keep_recent_turns=0,
    turn_statuses={"t1": TurnStatus.COMPLETED, "t2": TurnStatus.COMPLETED}))
show("not a message", lambda: build_window([*messages, "hi"]))
"""
)

# A gc callback that builds a window while the library is imported and on its first use (it
# deadlocked): setup happens once, on import, and never waits for itself.
SCENARIOS["gc_callback_builds_windows_during_import"] = """
import gc
seen = set()

def callback(phase, info):
    library = sys.modules.get("agentctx_fast")
    build = getattr(library, "build_window", None)
    user = getattr(library, "UserMessage", None)
    if phase != "start" or build is None or user is None:
        return
    try:
        seen.add(len(build([user("from a gc callback", message_id="g1")]).messages))
    except Exception as error:
        seen.add(type(error).__name__)

gc.callbacks.append(callback)
gc.set_threshold(1)
import agentctx_fast
from agentctx_fast import UserMessage, build_window
show("first", lambda: build_window([UserMessage("hi", message_id="u1")], system="Be brief."))
for _ in range(50):
    build_window([UserMessage("hi", message_id="u1")], system="Be brief.")
gc.set_threshold(700)
gc.callbacks.remove(callback)
print("callback windows", sorted(map(str, seen)))
assert seen == {1}, seen
"""

# ContextWindow replaced by a dict subclass whose metaclass lies about its bases (it crashed
# the interpreter): windows are still the library's ContextWindow.
SCENARIOS["context_window_replaced_by_lying_dict"] = (
    HISTORY
    + """
import agentctx_fast
import agentctx_fast.core.types as core_types
import agentctx_fast.core.window as window_module

class Lying(type):
    @property
    def __bases__(cls):
        return (object,)

class FakeWindow(dict, metaclass=Lying):
    __slots__ = ()

FakeWindow.__slots__ = ("messages", "estimated_tokens", "attached_turns", "_unread")

for module in (agentctx_fast, core_types, window_module):
    module.ContextWindow = FakeWindow
core_types.ProtocolViolation = dict
show("window", lambda: build_window(history(), max_attached_turns=1))
show("with repairs", lambda: build_window(history()))
"""
)

# ContextWindow's class meddled with after import: a window is what `object.__new__` makes of
# it on both backends, whatever `__new__` / `__init__` the class is given, and an abstract
# class (its `__abstractmethods__` set) fails the same way.
SCENARIOS["context_window_class_meddled_with"] = (
    HISTORY
    + """
from agentctx_fast import ContextWindow

def refuse(*args, **kwargs):
    raise RuntimeError("never called")

ContextWindow.__new__ = refuse
ContextWindow.__init__ = refuse
show("new and init replaced", lambda: build_window(history(), max_attached_turns=1))
ContextWindow.__abstractmethods__ = frozenset({"summary"})
show("abstract", lambda: build_window(history()))
show("abstract, with a system", lambda: build_window(history(), system="Be brief."))
ContextWindow.__abstractmethods__ = frozenset()
show("concrete again", lambda: build_window(history()))
"""
)

# A status whose __eq__ swaps a history item while the window is built (the synthetic result
# answered another call on the Rust backend): what was read stays what was read.
SCENARIOS["status_eq_swaps_a_history_item"] = (
    HISTORY
    + """
class Swapping(str):
    def __eq__(self, other):
        messages[2] = AiMessage(None, (ToolCall("zz", "other_tool"),), message_id="evil")
        messages[3] = ToolMessage("zz", "other result", message_id="evil-result")
        return str.__eq__(self, other)
    __hash__ = str.__hash__

# t1's status is looked up after t1 was read: the swap changes nothing of this window.
messages = history()
show("swap after read", lambda: build_window(messages, turn_statuses={"t1": Swapping("completed")}))
synthetic = [m.message_id for m in build_window(
    history(), turn_statuses={"t1": Swapping("completed")}).messages if ":missing" in m.message_id]
assert synthetic == ["c2:missing"], synthetic
# t2's is looked up before t1 is read: the window reads the swapped messages.
messages = history()
show("swap before read", lambda: build_window(
    messages, turn_statuses={"t2": Swapping("completed")}))
"""
)

# Subclasses that override model_visible, text, content, tool calls and ids: a message is what
# its properties say, on both backends, in windows, validation and segmentation.
SCENARIOS["subclasses_override_properties"] = (
    HISTORY
    + OVERRIDE
    + """
from agentctx_fast import (
    AgentActionMessage, check_tool_protocol, segment_turns, validate_tool_protocol,
)

class HiddenUser(UserMessage):
    model_visible = False

class HiddenAi(AiMessage):
    @property
    def model_visible(self):
        return 0

class ShownAction(AgentActionMessage):
    model_visible = "yes"

class LoudAi(AiMessage):
    text = override(lambda self: "overridden answer")

class QuietAi(AiMessage):
    text = override(lambda self: "")

class OtherCalls(AiMessage):
    tool_calls = override(lambda self: (ToolCall("x1", "lookup", '{"q": 1}'),))

class OtherResult(ToolMessage):
    tool_call_id = override(lambda self: "x1")

class OtherContent(UserMessage):
    content = override(lambda self: "overridden question, much longer than the stored one")

messages = [
    UserMessage("q0", message_id="u0"),
    HiddenAi(None, (ToolCall("h1", "hidden"),), message_id="ha0"),
    QuietAi("stored text", message_id="qa0"),
    OtherContent("short", message_id="u1"),
    OtherCalls(None, (ToolCall("c1", "get_order"),), message_id="a1"),
    OtherResult("c1", "result", message_id="r1"),
    LoudAi(None, message_id="f1"),
    HiddenUser("hidden question", message_id="hu"),
    ShownAction(payload={"b": 1}, message_id="act"),
    UserMessage("q2", message_id="u2"),
]
show("window", lambda: build_window(messages))
show("compacted", lambda: build_window(
    messages, compact_completed_tool_turns=True, compression_keep_recent_turns=0))
show("validate", lambda: validate_tool_protocol(messages))
show("segments", lambda: segment_turns(messages))
show("check", lambda: check_tool_protocol(messages))

class BadId(UserMessage):
    message_id = override(lambda self: 42 if ARMED else "b")

class BadCalls(AiMessage):
    tool_calls = override(lambda self: ("not a call",) if ARMED else ())

class BadText(ToolMessage):
    text = override(lambda self: b"bytes" if ARMED else "r")

ARMED = False
bad_ones = (BadId("q", message_id="b"), BadCalls(None, message_id="b"),
            BadText("c1", "r", message_id="b"))
ARMED = True
for bad in bad_ones:
    show(type(bad).__name__, lambda: build_window(
        [UserMessage("q", message_id="u"), AiMessage(None, (ToolCall("c1", "f"),),
         message_id="a"), bad, UserMessage("q", message_id="u9")]))
"""
)

# A str subclass with its own encode, len, eq and hash, in free text and in ids.
SCENARIOS["str_subclass_methods_never_run"] = (
    HISTORY
    + OVERRIDE
    + """
from agentctx_fast.core._backend import core

class Sly(str):
    def encode(self, *args, **kwargs):
        raise RuntimeError("encode ran")
    def __len__(self):
        return 0
    def __eq__(self, other):
        return True
    def __hash__(self):
        return 0
    def __iter__(self):
        raise RuntimeError("iter ran")

messages = [
    UserMessage(Sly("lone \\ud800 surrogate and text"), message_id="u1"),
    AiMessage(Sly("an answer"), message_id="a1"),
    UserMessage("next", message_id="u2"),
    AiMessage(None, (ToolCall("c1", "f", Sly("\\udfff{}")),), message_id="a2"),
    ToolMessage("c1", Sly("\\ud83d result"), message_id="r2"),
    AiMessage(Sly(""), message_id="a3"),
    UserMessage(Sly("\\ud800"), message_id="u3"),
]
show("window", lambda: build_window(messages, system=Sly("Be \\ud800 brief.")))
show("count_text", lambda: core.count_text(Sly("\\ud800 abc 订单")))
show("message_tokens", lambda: core.message_tokens(messages))

class SlyId(UserMessage):
    turn_id = override(lambda self: Sly("t1"))

show("sly turn ids", lambda: build_window(
    [SlyId("a", message_id="u1"), SlyId("b", message_id="u2")]))
"""
)

# Estimator counts past 2**64 (saturated in Rust, exact in Python), out of range, or of odd
# int classes: both sum exactly, or raise the same error.
SCENARIOS["estimator_counts_past_2_64"] = (
    HISTORY
    + """
class Huge:
    def __init__(self, value):
        self.value = value
    def estimate(self, messages):
        return self.value

class SlyInt(int):
    def __add__(self, other):
        return 0
    __radd__ = __add__
    def __gt__(self, other):
        return False
    def __lt__(self, other):
        return True

for value in (2**63 - 1, 2**63, 2**64, -1, True, 3.0, SlyInt(2**62), SlyInt(-5)):
    for budget in (None, 2**64 + 5, 2**65, 10):
        show(f"{value!r} / {budget!r}", lambda: build_window(
            history(), token_estimator=Huge(value), max_attached_tokens=budget))
show("huge budget", lambda: build_window(history(), max_attached_tokens=2**200))
"""
)

# A message changed behind the library's back with object.__setattr__ after a first window:
# both cores keep what they first read, and neither kept core has a name a caller could set.
SCENARIOS["core_kept_after_object_setattr"] = (
    HISTORY
    + """
messages = history()
show("before", lambda: build_window(messages, compact_completed_tool_turns=True,
                                    compression_keep_recent_turns=0))
object.__setattr__(messages[4], "text", "")
object.__setattr__(messages[2], "tool_calls", ())
object.__setattr__(messages[3], "text", "x" * 5000)
object.__setattr__(messages[9], "content", "changed " * 100)
object.__setattr__(messages[5], "model_visible", False) if False else None
show("after", lambda: build_window(messages, compact_completed_tool_turns=True,
                                   compression_keep_recent_turns=0))
show("clear a core", lambda: object.__setattr__(messages[4], "_core", None))
show("clear a view", lambda: object.__setattr__(messages[3], "_view", {"kind": 0}))
show("cleared", lambda: build_window(messages, compact_completed_tool_turns=True,
                                     compression_keep_recent_turns=0))
"""
)

# Python code that runs after the leading system message was read (a sequence's __getitem__,
# a later message's property) makes a message say otherwise, and tries to clear what the cores
# kept of it: both cores keep what they read (its id, its token count).
SCENARIOS["system_core_changed_during_the_scan"] = """
from collections.abc import Sequence
from agentctx_fast import AiMessage, SystemMessage, UserMessage, build_window

class Sneaky(SystemMessage):
    bad = False

    @property
    def message_id(self):
        return 42 if Sneaky.bad else "s0"

    @message_id.setter
    def message_id(self, value):
        pass

class Seq(Sequence):
    def __init__(self, items, hook):
        self.items, self.hook = items, hook
    def __len__(self):
        return len(self.items)
    def __getitem__(self, index):
        if index == len(self.items) - 1:
            self.hook()
        return self.items[index]

def rest():
    return [UserMessage("hi", message_id="u1"), AiMessage("hello", message_id="a1"),
            UserMessage("again", message_id="u2")]

sneaky = Sneaky("Be brief.")

def clear():
    Sneaky.bad = True
    for name in ("_core", "_view"):
        try:
            object.__setattr__(sneaky, name, None)
        except AttributeError as error:
            print("clear:", type(error).__name__)

show("id now bad, clearing refused", lambda: build_window(Seq([sneaky, *rest()], clear)))
show("id still kept", lambda: build_window([sneaky, *rest()]))

plain = SystemMessage("Be brief.", message_id="s1")
show("before", lambda: build_window([plain, *rest()]))

def lengthen():
    object.__setattr__(plain, "text", "many words " * 200)

show("text changed by __getitem__", lambda: build_window(Seq([plain, *rest()], lengthen)))

class Meddler(UserMessage):
    @property
    def model_visible(self):
        object.__setattr__(other, "text", "many words " * 200)
        return True

other = SystemMessage("Be brief.", message_id="s2")
messages = [other, *rest()[:2], Meddler("again", message_id="u2")]
show("text changed by a property, plain list", lambda: build_window(messages))
show("and after", lambda: build_window(messages))
"""

# count_turns(end=-1) and other ends (the window's dropped_turns calls it).
SCENARIOS["count_turns_odd_ends"] = (
    HISTORY
    + """
from agentctx_fast.core._backend import core

class SlyIndex(int):
    def __index__(self):
        return -1
    def __lt__(self, other):
        return True

for end in (-1, 0, 3, 2**70, -2**70, True, 2.0, "3", None, SlyIndex(4)):
    show(repr(end), lambda: core.count_turns(history(), end))
"""
)

# Objects that are not messages but look like them, and containers that are not sequences.
SCENARIOS["impostors_and_containers"] = (
    HISTORY
    + OVERRIDE
    + """
from collections import UserList
from agentctx_fast import Message
from agentctx_fast.core._backend import core

class ClassLiar:
    message_id = "liar"
    turn_id = None
    model_visible = True
    content = "hi"
    @property
    def __class__(self):
        return UserMessage

class CoreThief(UserMessage):
    _core = override(lambda self: history()[4]._core)

class LyingLength(UserList):
    def __len__(self):
        return len(self.data) + 3

bare = Message(message_id="bare")
real = history()
build_window(real)
for label, messages in [
    ("class liar", [*real, ClassLiar()]),
    ("bare message", [*real, bare]),
    ("core thief", [*real, CoreThief("stolen?", message_id="thief")]),
    ("lying length", LyingLength(real)),
    ("dict", {0: real[1]}),
    ("str", "hello"),
    ("generator", (m for m in real)),
    ("nested", [real]),
]:
    show(label, lambda: build_window(messages))
    show(label + " validate", lambda: core.validate(messages))
    show(label + " segment", lambda: core.segment(messages))
show("system liar", lambda: build_window(real, system=ClassLiar()))
"""
)

# Window options changed with object.__setattr__ after they were checked, and odd limits.
SCENARIOS["options_changed_after_checks"] = (
    HISTORY
    + """
from agentctx_fast import WindowOptions, build_window

class Text(str):
    pass

for name, value in [
    ("max_attached_turns", -1), ("max_attached_turns", "3"), ("max_attached_turns", 2**70),
    ("max_attached_messages", True), ("compression_keep_recent_turns", None),
    ("max_attached_tokens", -5), ("max_attached_tokens", 2**130),
    ("compact_completed_tool_turns", 1), ("max_attached_turns", 1),
    ("_compiled", (1, 100, False, 2, None)), ("_compiled", (1, 2)),
    ("_compiled", [1, 100, False, 2, None, "last"]), ("_compiled", None),
    ("_compiled", (1, 100, False, 2, None, "last")), ("_compiled", (1, 100, 0, 2, None, "last")),
    ("_compiled", (2**70, 2**70, True, 0, 2**140, "none")),
    ("_compiled", (1, 100, False, 2, None, Text("none"))), ("_compiled", WindowOptions()),
    ("_compiled", "options"), ("current_turn", "bogus"),
    ("current_turn_tool_results_kept", -1),
]:
    options = WindowOptions(compact_completed_tool_turns=True)
    object.__setattr__(options, name, value)
    show(f"{name}={value!r}", lambda: build_window(history(), options))

class SlyLimit(int):
    def __lt__(self, other):
        return False
    def __gt__(self, other):
        return True

show("sly limit", lambda: build_window(history(), max_attached_turns=SlyLimit(1)))
show("negative sly", lambda: build_window(history(), max_attached_turns=SlyLimit(-1)))
show("not options", lambda: build_window(history(), {"max_attached_turns": 1}))
"""
)

# Callbacks that change the history while a window reads it: statuses whose lookups mutate
# it, an estimator that empties it, a message whose __del__ edits it.
SCENARIOS["callbacks_mutate_the_history"] = (
    HISTORY
    + """
from collections.abc import Mapping

messages = history()

class Meddling(Mapping):
    def __init__(self, target):
        self.target = target
    def __contains__(self, key):
        if len(self.target) > 3:
            del self.target[3]
        return key == "t1"
    def __getitem__(self, key):
        self.target.append(UserMessage("late", message_id="late"))
        return TurnStatus.COMPLETED
    def __iter__(self):
        return iter(["t1"])
    def __len__(self):
        return 1

show("meddling statuses", lambda: build_window(messages, turn_statuses=Meddling(messages)))

class Emptying:
    def __init__(self, target):
        self.target = target
    def estimate(self, batch):
        self.target.clear()
        return len(batch)

messages = history()
show("emptying estimator", lambda: build_window(messages, token_estimator=Emptying(messages)))

class Haunted(UserMessage):
    def __del__(self):
        shared.clear()

class Reentrant(str):
    def __eq__(self, other):
        inner.append(len(build_window(messages, turn_statuses={"t1": Reentrant("failed")},
                                      max_attached_turns=1).messages))
        return str.__eq__(self, other)
    __hash__ = str.__hash__

messages, inner = history(), []
show("re-entrant build", lambda: build_window(messages, turn_statuses={"t1": Reentrant("x"),
                                                                      "t2": Reentrant("x")}))
print("inner windows", inner)

shared = history()
shared.insert(5, Haunted("boo", message_id="ghost"))
def drop_and_build():
    del shared[5]
    return build_window(shared)
show("__del__ clears", drop_and_build)
"""
)

# A finalizer run by the collector swaps the history's last message while a window is built
# (the first allocation of a window whose messages were all read inline is its list): the
# window's messages are the ones it counted, whichever side of the swap it read.
SCENARIOS["finalizer_swaps_the_history_during_a_window"] = (
    HISTORY
    + """
import gc

messages = history()
del messages[1:5]  # no repairs: the window is the history's last messages
before = list(messages)
swapped = UserMessage("A much longer question that replaced the last one", message_id="swap")
build_window(before), build_window(before[:-1] + [swapped])  # every core kept

class Swapper:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it

    def __del__(self):
        messages[-1] = swapped

seen = set()
gc.collect()
gc.set_threshold(1)
for _ in range(40):
    messages[:] = before
    gc.enable()
    keep = [[] for _ in range(100)]  # no spare list is left: a window's list is a new object
    Swapper()
    window = build_window(messages)
    del keep
    gc.disable()
    fresh = build_window(window.messages[1:], system=window.messages[0])
    seen.add(window.estimated_tokens == fresh.estimated_tokens)
    gc.enable()
gc.set_threshold(700)
gc.collect()
show("windows match their messages", lambda: sorted(seen))
assert seen == {True}, seen
show("after the swap", lambda: build_window(messages))
"""
)

# A property that runs while a window reads its message (its core not kept yet) swaps a
# message the window read before: the window is the messages it read and counted, never the
# list as the property left it (a window whose items are one run of the list must not be
# sliced from the list once Python code ran).
SCENARIOS["property_swaps_a_read_message_during_a_window"] = (
    HISTORY
    + OVERRIDE
    + """
messages = history()
del messages[1:5]  # no repairs: the window is one run of the history
swapped = UserMessage("A much longer question that replaced the last one", message_id="swap")
build_window(messages), build_window(messages[:-1] + [swapped])  # every core kept

class Meddling(AiMessage):
    def _visible(self):
        messages[-1] = swapped  # read already: the scan goes backwards
        return True
    model_visible = override(_visible)

messages[-2] = Meddling("It is late.", message_id="f2", turn_id="t2")
show("window", lambda: build_window(messages))
show("after the swap", lambda: build_window(messages))
"""
)

# Copies, deep copies and pickles of messages whose core was cached.
# A property patched onto an exact library class runs when an uncounted message is counted
# (every core kept, no token counted yet): it swaps a message the window already read.
SCENARIOS["token_count_of_kept_core_runs_a_class_property"] = (
    HISTORY
    + """
from agentctx_fast import validate_tool_protocol, UserMessage as U
messages = history()
del messages[2:5]
swapped = UserMessage("A much longer question that replaced the last one", message_id="swap")
validate_tool_protocol(messages)  # every core kept, no token counted
field = U.__dict__["content"]
def content(self):
    messages[-1] = swapped
    return field.__get__(self, U)
U.content = property(content)
show("window", lambda: build_window(messages))
U.content = field
show("after", lambda: build_window(messages))
"""
)

# The same, run when the core of a message of an exact class is first read, for a message the
# backward scan reads but the window leaves out.
SCENARIOS["fresh_core_read_beyond_the_window_runs_a_class_property"] = (
    HISTORY
    + """
from agentctx_fast import AiMessage as A
messages = history()
del messages[2:5]
swapped = UserMessage("A much longer question that replaced the last one", message_id="swap")
build_window(messages), build_window(messages[:-1] + [swapped])
field = A.__dict__["text"]
def text(self):
    messages[-1] = swapped
    return field.__get__(self, A)
messages[-2] = AiMessage("It is late.", message_id="f2", turn_id="t2")  # no core kept
A.text = property(text)
show("window", lambda: build_window(messages, max_attached_turns=0))
A.text = field
show("after", lambda: build_window(messages, max_attached_turns=0))
"""
)

# Properties named as a kept core might be (`_core`, `_view`) put on a library class: neither
# core reads them, so the windows and token counts are the same with them and without.
SCENARIOS["core_property_on_a_library_class"] = (
    HISTORY
    + """
from agentctx_fast import UserMessage as U
messages = history()
show("before", lambda: build_window(messages))
for name in ("_core", "_view"):
    setattr(U, name, property(lambda self: 1 / 0))
    show(name, lambda: build_window(messages))
    show(name + " tokens", lambda: build_window(messages).estimated_tokens)
    show(name + " fresh", lambda: build_window(history()))
    delattr(U, name)
show("after", lambda: build_window(messages))
"""
)

SCENARIOS["copies_and_pickles"] = (
    HISTORY
    + """
import copy, pickle
messages = history()
build_window(messages)
for how in (copy.copy, copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))):
    copied = [how(m) for m in messages]
    show("copied", lambda: build_window(copied, max_attached_tokens=200))
"""
)


REPORT_BACKEND = """
import agentctx_fast
print("backend", agentctx_fast.backend)
"""


def _run(script: str, backend: str) -> str:
    env = dict(os.environ)
    env["AGENTCTX_FAST_BACKEND"] = backend
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    code = COMMON + textwrap.dedent(script) + REPORT_BACKEND
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the scenario hung on the {backend} backend")
    assert proc.returncode == 0, (
        f"the {backend} backend crashed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}"
    )
    lines = proc.stdout.splitlines()
    assert lines[-1] == f"backend {backend}", lines[-1:]
    return "\n".join(lines[:-1])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_both_backends_agree_and_survive(name: str) -> None:
    native_or_skip()
    python = _run(SCENARIOS[name], "python")
    rust = _run(SCENARIOS[name], "rust")
    assert python.strip(), "the scenario printed nothing"
    assert rust.splitlines() == python.splitlines()


def test_gc_callbacks_and_threads_never_crash_a_build() -> None:
    """gc callbacks and other threads that edit the history mid-build: when collections run
    differs between the cores, so only safety is compared: no crash, no hang, and each build
    either a window that starts with a user message or a typed error."""
    native_or_skip()
    script = (
        HISTORY
        + """
import gc, threading
from agentctx_fast import AgentCtxError

messages = history() * 20
def meddle(phase, info):
    if phase == "start" and len(messages) > 12:
        messages[len(messages) // 2] = "junk"
        del messages[-2]
        messages.append(UserMessage("gc", message_id="gc"))

def build_many():
    for _ in range(200):
        try:
            window = build_window(messages, max_attached_turns=3)
        except (AgentCtxError, IndexError):
            continue
        first = window.messages[1] if len(window.messages) > 1 else window.messages[0]
        assert type(first).__name__ in ("UserMessage", "SystemMessage"), first

def edit():
    for i in range(2000):
        messages.insert(i % 7, UserMessage("t", message_id=f"x{i}"))
        messages.pop(0)

gc.callbacks.append(meddle)
gc.set_threshold(5)
threads = [threading.Thread(target=build_many) for _ in range(3)]
threads.append(threading.Thread(target=edit))
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
gc.callbacks.remove(meddle)
print("survived")
"""
    )
    for backend in ("python", "rust"):
        assert _run(script, backend) == "survived"


LEAK_CHECK = """
import resource, gc
from agentctx_fast import AiMessage, ToolCall, UserMessage, build_window, validate_tool_protocol
from agentctx_fast.core._backend import core

def rss_kib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // 1024

history = []
for turn in range(60):
    history.append(UserMessage(f"question {turn}", message_id=f"u{turn}", turn_id=f"t{turn}"))
    history.append(AiMessage(None, (ToolCall(f"c{turn}", "f"),), message_id=f"a{turn}"))
    history.append(AiMessage("done", message_id=f"f{turn}"))
bad = [*history[:10], "junk", *history[10:]]

def rounds(count):
    for i in range(count):
        build_window(history, system="Be brief.", compact_completed_tool_turns=i % 2 == 0)
        for call in (lambda: build_window(bad), lambda: build_window([]),
                     lambda: build_window(history, max_attached_turns=-1),
                     lambda: core.count_turns(history, -1)):
            try:
                call()
            except Exception:
                pass
        if i % 4 == 0:
            validate_tool_protocol(history)
            build_window([UserMessage("fresh", message_id=f"n{i}")])

rounds(ROUNDS // 10)
gc.collect()
before = rss_kib()
rounds(ROUNDS)
gc.collect()
grown = rss_kib() - before
print("grown", grown)
assert grown < 4096, f"RSS grew by {grown} KiB over {ROUNDS} rounds"
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_rss_stays_flat_over_many_builds_and_errors() -> None:
    """About 200,000 windows on the Rust backend (error paths included): RSS stays flat."""
    native_or_skip()
    output = _run(LEAK_CHECK.replace("ROUNDS", "40_000"), "rust")
    assert output.startswith("grown")
