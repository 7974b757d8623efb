"""The SQL store's schema: pages are index ranges of one conversation."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from store_fixtures import make_store


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_pages_read_one_conversation_s_own_index_range(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A page is an index range of its conversation: on PostgreSQL the primary key leads with
    the conversation, so no plan walks other conversations' newer rows."""
    store = make_store(kind, request)
    try:
        name = store._tables.messages.name
        inspector = sa.inspect(store.engine)
        keys = inspector.get_pk_constraint(name)["constrained_columns"]
        indexed = {tuple(i["column_names"]) for i in inspector.get_indexes(name)}
        assert ("conversation_id", "seq") in {tuple(keys), *indexed}
        assert keys == (["seq"] if kind == "sqlite" else ["conversation_id", "seq"])
    finally:
        store.close()
