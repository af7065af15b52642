"""Codec speed: records/s for encode and decode of a typical event, against raw fastavro.

Run: .venv/bin/python benchmarks/codec_bench.py [--n 20000] [--repeat 5]
        [--types approval.required,run.created,tool.call.completed,run.resume]

"raw" is fastavro's schemaless_writer/schemaless_reader with the pre-parsed schema and a
BytesIO, i.e. the floor for any fastavro-based codec. The bar: the codec within 1.25x of
raw. Decoding a current-version record goes through the schema's generated reader
(`runfacts.schemas.binary.readers`), so it can beat raw fastavro; old versions take fastavro's
schema resolution. Model-level rows add pydantic (validated, or trusted construction).
Each figure is the best of --repeat runs of --n records, in records per CPU-second.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from runfacts.schemas import construct
from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec, CodecSettings
from runfacts.schemas.spec.samples import sample


def rate(fn: Callable[[], Any], n: int, repeat: int) -> float:
    """Best records per CPU-second over `repeat` runs of `n` calls."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - start)
    return n / best


def cases(type_name: str) -> dict[str, Callable[[], Any]]:
    """The measured operations, keyed by row label."""
    entry = default_catalog().by_type[type_name]
    strict, trusted = Codec(CodecSettings(validate=True)), Codec(CodecSettings(validate=False))
    values = sample(entry)
    model = strict.decode(strict.encode_dict(values))
    data = strict.encode(model)
    body, parsed, cls = data[10:], entry.parsed, type(model)
    read_values = schemaless_reader(io.BytesIO(body), parsed, None)

    def raw_write() -> bytes:
        out = io.BytesIO()
        schemaless_writer(out, parsed, values)
        return out.getvalue()

    return {
        "raw fastavro write": raw_write,
        "codec encode_dict": lambda: strict.encode_dict(values),
        "codec encode(model)": lambda: strict.encode(model),
        "raw fastavro read": lambda: schemaless_reader(io.BytesIO(body), parsed, None),
        "codec decode_dict": lambda: strict.decode_dict(data),
        "codec decode (validated)": lambda: strict.decode(data),
        "codec decode (trusted)": lambda: trusted.decode(data),
        "codec decode_envelope (trusted)": lambda: trusted.decode_envelope(data),
        "pydantic model_validate only": lambda: cls.model_validate(read_values),
        "trusted build only": lambda: construct.build(cls, _copy(read_values)),
        "copy of the dict (build input)": lambda: _copy(read_values),
    }


def _copy(values: dict[str, Any]) -> dict[str, Any]:
    return {k: dict(v) if isinstance(v, dict) else v for k, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--types", default="approval.required,run.created,tool.call.completed,"
                                                "run.resume")
    args = parser.parse_args()
    for type_name in args.types.split(","):
        entry = default_catalog().by_type[type_name]
        print(f"{entry.kind} {type_name} v{entry.version}, "
              f"{len(Codec().encode_dict(sample(entry)))} bytes framed; n={args.n}, "
              f"best of {args.repeat}")
        rates = {label: rate(fn, args.n, args.repeat) for label, fn in cases(type_name).items()}
        for label, value in rates.items():
            print(f"  {label:34s} {value:>11,.0f} rec/s  {1e6 / value:6.2f} us")
        _ratios(rates)


def _ratios(rates: dict[str, float]) -> None:
    write, read = rates["raw fastavro write"], rates["raw fastavro read"]
    print("ratios (time vs raw fastavro; bar <= 1.25):")
    for label, raw in [("codec encode_dict", write), ("codec encode(model)", write),
                       ("codec decode_dict", read), ("codec decode (validated)", read),
                       ("codec decode (trusted)", read)]:
        print(f"  {label:34s} {raw / rates[label]:5.2f}x")
    speedup = rates["codec decode_envelope (trusted)"] / rates["codec decode (trusted)"]
    print(f"  envelope-only decode speed-up vs full trusted decode: {speedup:4.2f}x")


if __name__ == "__main__":
    main()
