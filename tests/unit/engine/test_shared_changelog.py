"""A store whose changelog is a topic the application owns (`Application.changelogs`)."""

from __future__ import annotations

import pytest

from runfacts.processors.engine.api import Application, Context, Record, Source
from runfacts.processors.engine.changelog import check_shared_changelog
from runfacts.processors.engine.store import changelog_key, changelog_topic_key
from runfacts.processors.engine.testdriver import InputRecord, TestDriver
from runfacts.schemas.errors import ConfigError

STATE = "app.state"


def put_state(record: Record, ctx: Context) -> None:
    """Store the input under its key; the changelog record carries a version header."""
    if record.value == b"delete":
        ctx.store("states").delete(record.key)
        return
    old = ctx.store("states").get(record.key)
    version = 1 if old is None else int(old.split(b"|")[0]) + 1
    ctx.put("states", record.key, b"%d|%s" % (version, record.value), [("version", str(version).encode())])
    ctx.store("other").put(record.key, b"seen")


def app(shared: bool = True) -> Application:
    return Application(name="sh", sources=(Source("input"),), process=put_state,
                       stores=("states", "other"), changelogs={"states": STATE} if shared else {})


def test_puts_appear_once_on_the_shared_topic_with_headers_when_committed() -> None:
    driver = TestDriver(app(), partitions=2)
    driver.pipe_batch([InputRecord("input", b"a", b"x"), InputRecord("input", b"a", b"y"),
                       InputRecord("input", b"b", b"z")])
    records = driver.outputs(STATE)
    assert sorted((r.key, r.value, r.headers) for r in records) == [
        (b"a", b"2|y", [("version", b"2")]), (b"b", b"1|z", [("version", b"1")])]
    for r in records:  # on the task's partition, explicitly
        assert r.partition == driver._partition_of(r.key)
    topics = {t for t, _p in driver.log.logs}
    assert "sh-states-changelog" not in topics
    assert "sh-other-changelog" in topics  # a store without a shared topic keeps its own
    for p, backend in driver.backends.items():
        meta = backend.meta()
        log = driver.log.logs.get((STATE, p))
        if log:
            assert meta[changelog_key("states")] == str(log[-1].offset).encode()


def test_restore_rebuilds_the_store_from_the_shared_topic_when_state_lost() -> None:
    driver = TestDriver(app(), partitions=2)
    for value in (b"x", b"y"):
        driver.pipe_batch([InputRecord("input", k, value) for k in (b"a", b"b", b"c")])
    before = driver.read_store("states")
    restored = driver.restart(lose_state=True)
    assert driver.read_store("states") == before == {k: b"2|y" for k in (b"a", b"b", b"c")}
    assert restored == 6 + 6  # 6 states, 6 puts of `other`
    driver.pipe("input", b"w", b"a")  # continues from the restored version
    assert driver.outputs(STATE)[-1].value == b"3|w"


def test_delete_produces_a_tombstone_without_headers_on_the_shared_topic() -> None:
    driver = TestDriver(app())
    driver.pipe("input", b"x", b"a")
    driver.pipe("input", b"delete", b"a")
    last = driver.outputs(STATE)[-1]
    assert (last.key, last.value, last.headers) == (b"a", None, None)
    driver.restart(lose_state=True)
    assert driver.read_store("states") == {}


def test_upgrade_rebuilds_the_store_from_the_shared_topic_from_offset_zero() -> None:
    """An old deployment: the store reflects its own changelog up to offset N and the state
    topic holds the same records at other offsets. The new layout must never read the old
    offset as one of the shared topic: it rebuilds from 0."""
    old = Application(name="sh", sources=(Source("input"),), process=_old_layout,
                      stores=("states", "other"))
    driver = TestDriver(old)
    for value in (b"x", b"y", b"z"):
        driver.pipe("input", value, b"a")
    assert driver.backends[0].meta()[changelog_key("states")] == b"2"  # of sh-states-changelog
    driver.backends[0].data["states"][b"stale"] = b"only in the old store"
    restored = driver.restart(app=app())
    meta = driver.backends[0].meta()
    assert meta[changelog_topic_key("states")] == STATE.encode()
    assert meta[changelog_key("states")] == b"2"  # now an offset of the shared topic
    assert driver.read_store("states") == {b"a": b"3|z"}  # rebuilt: the stale key is gone
    assert restored == 3  # every record of the shared topic, from 0; `other` was current
    assert driver.restart() == 0  # recorded now: no second rebuild
    driver.pipe("input", b"w", b"a")
    assert driver.outputs(STATE)[-1].value == b"4|w"


def _old_layout(record: Record, ctx: Context) -> None:
    """The old way: the store on its own changelog and the state emitted by the handler."""
    old = ctx.store("states").get(record.key)
    version = 1 if old is None else int(old.split(b"|")[0]) + 1
    body = b"%d|%s" % (version, record.value)
    ctx.store("states").put(record.key, body)
    ctx.store("other").put(record.key, b"seen")
    ctx.emit(STATE, record.key, body, [("version", str(version).encode())], partition=ctx.partition)


@pytest.mark.parametrize(("changelogs", "message"), [
    ({"nope": STATE}, "names no store"),
    ({"states": "input"}, "is a source"),
    ({"states": STATE, "other": STATE}, "two stores share one topic"),
])
def test_application_refuses_a_shared_changelog_when_misdeclared(changelogs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        Application(name="sh", sources=(Source("input"),), process=put_state,
                    stores=("states", "other"), changelogs=changelogs)


@pytest.mark.parametrize(("found", "configs", "message"), [
    (None, {}, "does not exist: create it with `runfacts topics apply`"),
    (3, {"cleanup.policy": "compact"}, "has 3 partitions, the sources 6"),
    (6, {"cleanup.policy": "delete", "retention.ms": "-1"}, "cleanup.policy=delete: a changelog must be compacted"),
    (6, {"cleanup.policy": "compact,delete", "retention.ms": "604800000"}, "retention.ms=604800000"),
    (6, {"cleanup.policy": "compact,delete", "retention.bytes": "1000"}, "retention.bytes=1000"),
])
def test_shared_changelog_is_refused_when_it_could_lose_state(found, configs, message) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        check_shared_changelog("states", STATE, found, 6, configs)
    assert STATE in str(err.value) and "states" in str(err.value)


@pytest.mark.parametrize("configs", [
    {"cleanup.policy": "compact", "retention.ms": "604800000"},  # ignored without delete
    {"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"},
])
def test_shared_changelog_is_accepted_when_compacted_and_kept(configs) -> None:
    check_shared_changelog("states", STATE, 6, 6, configs)


def put_twice(record: Record, ctx: Context) -> None:
    """A put with headers, then one without, of the same key in one transaction."""
    ctx.put("states", record.key, b"first", [("version", b"1")])
    ctx.put("states", record.key, b"second")


def test_the_last_put_of_a_key_in_a_transaction_gives_its_record_headers_or_none() -> None:
    application = Application(name="sh", sources=(Source("input"),), process=put_twice,
                              stores=("states",), changelogs={"states": STATE})
    driver = TestDriver(application, partitions=1)
    driver.pipe_batch([InputRecord("input", b"a", b"x")])
    assert [(r.value, r.headers or None) for r in driver.outputs(STATE)] == [(b"second", None)]
