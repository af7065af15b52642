"""The engine's per-record and commit steps through the broker-free test driver."""

from __future__ import annotations

import json

import pytest

from runfacts.dev.apps import counter_app
from runfacts.processors.engine.api import JSON, UTF8, Application, Context, ProcessingError, Record, Source
from runfacts.processors.engine.store import changelog_key, input_key
from runfacts.processors.engine.testdriver import InputRecord, TestDriver
from runfacts.schemas.errors import ConfigError, InvalidInput


def bodies(driver: TestDriver, topic: str = "output") -> list[dict]:
    return [json.loads(r.value) for r in driver.outputs(topic)]


def test_counter_emits_one_output_per_input_when_records_piped() -> None:
    driver = TestDriver(counter_app())
    for key in (b"a", b"b", b"a"):
        driver.pipe("input", b"x", key)
    assert [(b["key"], b["n"]) for b in bodies(driver)] == [("a", 1), ("b", 1), ("a", 2)]
    assert driver.read_store("counts") == {b"a": b"2", b"b": b"1"}


def test_output_ids_are_deterministic_when_same_input_replayed() -> None:
    first, second = TestDriver(counter_app()), TestDriver(counter_app())
    for driver in (first, second):
        driver.pipe_batch([InputRecord("input", b"k", b"x")] * 3)
    ids = [b["id"] for b in bodies(first)]
    assert ids == [b["id"] for b in bodies(second)]
    assert len(set(ids)) == 3


def test_store_write_holds_input_and_changelog_offsets_when_committed() -> None:
    driver = TestDriver(counter_app())
    driver.pipe_batch([InputRecord("input", b"a", b"x"), InputRecord("input", b"b", b"x")])
    meta = driver.backends[0].meta()
    assert meta[input_key("input")] == b"1"
    changelog = driver.outputs("counter-counts-changelog")
    assert [r.key for r in changelog] == [b"a", b"b"]
    assert meta[changelog_key("counts")] == str(changelog[-1].offset).encode()


def test_invalid_value_goes_to_dead_letter_when_policy_is_dead_letter() -> None:
    driver = TestDriver(counter_app())
    driver.pipe("input", b"\xff\xfe", b"k", headers=[("trace", b"1")])
    driver.pipe("input", b"ok", b"k")
    (dead,) = driver.dead_letters()
    headers = dict(dead.headers or [])
    assert (dead.key, dead.value) == (b"k", b"\xff\xfe")
    assert headers["trace"] == b"1"
    assert (headers["dlq.topic"], headers["dlq.partition"], headers["dlq.offset"]) == (
        b"input", b"0", b"0")
    assert headers["dlq.schema"] == b"demo.Utf8"
    assert b"not UTF-8" in headers["dlq.error"]
    assert [b["n"] for b in bodies(driver)] == [1]


def test_invalid_value_stops_with_position_when_policy_is_fail() -> None:
    app = counter_app()
    strict = Application(app.name, (Source("input", value_deserializer=app.sources[0]
                                           .value_deserializer, on_invalid="fail"),),
                         app.process, app.stores)
    driver = TestDriver(strict)
    with pytest.raises(InvalidInput, match=r"input\[0\]@0: demo.Utf8 v1: not UTF-8"):
        driver.pipe("input", b"\xff", b"k")
    assert driver.outputs() == []


def test_handler_error_rolls_back_whole_batch_when_handler_raises() -> None:
    driver = TestDriver(counter_app(fail_on="boom"))
    driver.pipe("input", b"x", b"k")
    batch = [InputRecord("input", b"k", b"x"), InputRecord("input", b"k", b"boom")]
    with pytest.raises(ProcessingError, match=r"handler failed on input\[0\]@2: RuntimeError"):
        driver.pipe_batch(batch)
    assert driver.read_store("counts") == {b"k": b"1"}
    assert [b["n"] for b in bodies(driver)] == [1]
    assert driver.backends[0].meta()[input_key("input")] == b"0"


def test_aborted_commit_is_rolled_back_and_replayed_when_transaction_aborts() -> None:
    driver = TestDriver(counter_app())
    driver.pipe("input", b"x", b"k")
    driver.abort_next_commit()
    driver.pipe_batch([InputRecord("input", b"k", b"x"), InputRecord("input", b"j", b"x")])
    out = bodies(driver)
    assert [(b["key"], b["n"]) for b in out] == [("k", 1), ("k", 2), ("j", 1)]
    assert len({b["id"] for b in out}) == 3
    assert driver.read_store("counts") == {b"k": b"2", b"j": b"1"}


def test_restart_restores_identical_state_when_local_store_lost() -> None:
    driver = TestDriver(counter_app(idle_ms=1000), partitions=3)
    for i in range(30):
        driver.pipe("input", b"x", f"k{i % 7}".encode())
    before = {s: driver.read_store(s) for s in ("counts", "__timers")}
    assert driver.restart(lose_state=True) > 0
    assert {s: driver.read_store(s) for s in ("counts", "__timers")} == before
    driver.pipe("input", b"x", b"k0")
    assert bodies(driver)[-1]["n"] == 6


def test_restore_skips_records_already_in_store_when_store_is_current() -> None:
    driver = TestDriver(counter_app())
    driver.pipe("input", b"x", b"k")
    assert driver.restart() == 0
    driver.pipe("input", b"x", b"k")
    assert driver.restart() == 0
    assert driver.read_store("counts") == {b"k": b"2"}


def test_timer_fires_once_when_clock_passes_due_time() -> None:
    driver = TestDriver(counter_app(idle_ms=1000), start_ms=10_000)
    driver.pipe("input", b"x", b"k")
    assert driver.advance(999) == 0
    assert driver.advance(1) == 1
    assert driver.advance(10_000) == 0
    idle = [b for b in bodies(driver) if b.get("idle")]
    assert [(b["key"], b["n"]) for b in idle] == [("k", 1)]


def test_timer_moves_when_rescheduled_before_due() -> None:
    driver = TestDriver(counter_app(idle_ms=1000), start_ms=0)
    driver.pipe("input", b"x", b"k")
    driver.advance(600)
    driver.pipe("input", b"x", b"k")
    assert driver.advance(500) == 0
    assert driver.advance(500) == 1
    assert driver.read_store("__timers") == {}


def test_timer_survives_restart_when_store_rebuilt_from_changelog() -> None:
    driver = TestDriver(counter_app(idle_ms=1000))
    driver.pipe("input", b"x", b"k")
    driver.restart(lose_state=True)
    assert driver.advance(1000) == 1


def test_fired_timer_fires_again_when_its_commit_aborts() -> None:
    driver = TestDriver(counter_app(idle_ms=10))
    driver.pipe("input", b"x", b"k")
    driver.abort_next_commit()
    assert driver.advance(10) == 1
    assert len([b for b in bodies(driver) if b.get("idle")]) == 1


def test_timers_fire_in_due_order_when_several_are_due() -> None:
    seen: list[str] = []

    def process(record: Record, ctx: Context) -> None:
        ctx.schedule(record.key, int(record.value), record.key.decode())

    def on_timer(timer, ctx: Context) -> None:
        seen.append(f"{timer.timer_id}@{timer.due_ms}")

    cancelled = Application("t", (Source("in"),), process, on_timer=on_timer)
    driver = TestDriver(cancelled)
    for key, due in ((b"c", b"30"), (b"a", b"10"), (b"b", b"20")):
        driver.pipe("in", due, key)
    driver.advance(100)
    assert seen == ["a@10", "b@20", "c@30"]


def test_cancelled_timer_does_not_fire_when_due() -> None:
    def process(record: Record, ctx: Context) -> None:
        if record.value == b"cancel":
            assert ctx.cancel(record.key, "t")
        else:
            ctx.schedule(record.key, 5, "t")

    driver = TestDriver(Application("t", (Source("in"),), process, on_timer=lambda t, c: None))
    driver.pipe("in", b"set", b"k")
    driver.pipe("in", b"cancel", b"k")
    assert driver.advance(10) == 0


def test_schedule_raises_config_error_when_app_has_no_on_timer() -> None:
    def process(record: Record, ctx: Context) -> None:
        ctx.schedule(b"k", 1, "t")

    driver = TestDriver(Application("t", (Source("in"),), process))
    with pytest.raises(ProcessingError, match="has no on_timer"):
        driver.pipe("in", b"x", b"k")


def test_typed_store_round_trips_values_when_serdes_given() -> None:
    def process(record: Record, ctx: Context) -> None:
        runs = ctx.typed("runs", UTF8, JSON)
        state = runs.get(record.key.decode(), {"events": []})
        runs.put(record.key.decode(), {"events": [*state["events"], record.value.decode()]})

    driver = TestDriver(Application("t", (Source("in"),), process, stores=("runs",)))
    driver.pipe("in", b"a", b"r1")
    driver.pipe("in", b"b", b"r1")
    assert json.loads(driver.read_store("runs")[b"r1"]) == {"events": ["a", "b"]}


def test_store_put_raises_type_error_when_value_is_not_bytes() -> None:
    def process(record: Record, ctx: Context) -> None:
        ctx.store("s").put(record.key, "text")  # type: ignore[arg-type]

    driver = TestDriver(Application("t", (Source("in"),), process, stores=("s",)))
    with pytest.raises(ProcessingError, match="store s: key and value must be bytes"):
        driver.pipe("in", b"x", b"k")


def test_delete_removes_key_when_committed() -> None:
    def process(record: Record, ctx: Context) -> None:
        store = ctx.store("s")
        if record.value == b"del":
            store.delete(record.key)
        else:
            store.put(record.key, record.value)

    driver = TestDriver(Application("t", (Source("in"),), process, stores=("s",)))
    driver.pipe("in", b"v", b"k")
    driver.pipe("in", b"del", b"k")
    assert driver.read_store("s") == {}
    assert driver.outputs("t-s-changelog")[-1].value is None


@pytest.mark.parametrize("kwargs, setting", [
    ({"stores": ("__x",)}, "application.stores"),
    ({"stores": ("a", "a")}, "application.stores"),
    ({"sources": (Source("in"), Source("in"))}, "application.sources"),
    ({"sources": ()}, "application.sources"),
    ({"name": "bad name"}, "application.name"),
])
def test_application_raises_config_error_when_declaration_invalid(kwargs, setting) -> None:
    args = {"name": "t", "sources": (Source("in"),), "process": lambda r, c: None, **kwargs}
    with pytest.raises(ConfigError, match=f"setting {setting}="):
        Application(**args)


def _batching_app() -> Application:
    """Counts per key in ctx.batch; flush writes each key's last count once per transaction."""

    def process(record: Record, ctx: Context) -> None:
        last = ctx.batch.get(record.key)
        stored = int(ctx.store("counts").get(record.key) or b"0")
        ctx.batch[record.key] = (last if last is not None else stored) + 1

    def flush(ctx: Context) -> None:
        for key, n in ctx.batch.items():
            ctx.store("counts").put(key, str(n).encode())
            ctx.emit("output", key, str(n).encode())

    return Application("batching", (Source("input"),), process, ("counts",), flush=flush)


def test_flush_writes_once_per_key_and_transaction_when_a_batch_repeats_keys() -> None:
    driver = TestDriver(_batching_app())
    driver.pipe_batch([InputRecord("input", k, b"x") for k in (b"a", b"b", b"a", b"a")])
    driver.pipe("input", b"x", b"a")
    assert [(r.key, r.value) for r in driver.outputs("output")] == [(b"a", b"3"), (b"b", b"1"), (b"a", b"4")]
    assert driver.read_store("counts") == {b"a": b"4", b"b": b"1"}
    assert [r.value for r in driver.outputs("batching-counts-changelog")] == [b"3", b"1", b"4"]


def test_batch_is_emptied_and_replayed_when_the_commit_aborts() -> None:
    driver = TestDriver(_batching_app())
    driver.abort_next_commit()
    driver.pipe_batch([InputRecord("input", b"a", b"x")] * 2)
    assert [r.value for r in driver.outputs("output")] == [b"2"]
    assert all(not task.ctx.batch for task in driver.tasks.values())


def test_flush_error_names_the_partition_when_flush_raises() -> None:
    def broken(ctx: Context) -> None:
        raise RuntimeError("boom")

    app = Application("broken", (Source("input"),), lambda r, c: c.batch.update({r.key: 1}), flush=broken)
    driver = TestDriver(app)
    with pytest.raises(ProcessingError, match="flush of partition 0"):
        driver.pipe("input", b"x", b"a")
    assert driver.outputs() == []


def test_handler_dead_letters_the_record_unchanged_when_it_refuses_it() -> None:
    def process(record: Record, ctx: Context) -> None:
        if record.value == b"refuse me":
            ctx.dead_letter(InvalidInput("not wanted here", schema="Probe"))
        else:
            ctx.emit("output", record.key, record.value)

    driver = TestDriver(Application("refuser", (Source("input"),), process))
    driver.pipe("input", b"refuse me", b"k", headers=[("trace", b"1")])
    driver.pipe("input", b"fine", b"k")

    (dead,) = driver.dead_letters()
    headers = dict(dead.headers or [])
    assert (dead.key, dead.value) == (b"k", b"refuse me")
    assert headers["trace"] == b"1" and headers["dlq.error"] == b"not wanted here"
    assert (headers["dlq.topic"], headers["dlq.offset"], headers["dlq.app"]) == (b"input", b"0", b"refuser")
    assert [r.value for r in driver.outputs("output")] == [b"fine"]
