#!/usr/bin/env python3
"""Checkpoint mutants for scripts/fault.sh: damaged or lying copies of a tandem-train checkpoint.

  fault_mutate.py list                 names of the mutants, one per line, with what each does
  fault_mutate.py apply NAME SRC DST [OTHER]
                                       writes mutant NAME of checkpoint SRC to DST (OTHER:
                                       another checkpoint of the run, for header-of-other)

Kinds of mutant: raw damage (truncations, bit flips in the length, the header and the data,
garbage) that leaves the recorded checksum stale, and "sealed" lies: a header or data
rewritten by a writer that then records a fresh "tandem.crc32" (runtime/checkpoint.h
defines what it covers), so that each check behind the checksum is reached on its own.
Python's standard library only.
"""
import json
import math
import re
import struct
import sys
import zlib

CHECKSUM_KEY = "tandem.crc32"
DTYPE_BYTES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "U8": 1}


class Checkpoint:
    """A safetensors file as its header (dict, file order) and its data section."""

    def __init__(self, raw):
        (n,) = struct.unpack("<Q", raw[:8])
        self.header = json.loads(raw[8 : 8 + n].decode("utf-8"))
        self.data = bytearray(raw[8 + n :])

    def entries(self):
        return [k for k in self.header if k != "__metadata__"]

    def span(self, name):
        begin, end = self.header[name]["data_offsets"]
        return begin, end

    def tensor_bytes(self, name):
        begin, end = self.span(name)
        return bytes(self.data[begin:end])

    def repack(self, contents):
        """Rewrites the data section from {name: bytes} in the current entry order."""
        data = bytearray()
        for name in self.entries():
            blob = contents[name]
            self.header[name]["data_offsets"] = [len(data), len(data) + len(blob)]
            data += blob
        self.data = data

    def contents(self):
        return {name: self.tensor_bytes(name) for name in self.entries()}

    def seal(self):
        """Records the checksum tandem's writer would record for this header and data."""
        meta = {k: v for k, v in self.header.get("__metadata__", {}).items() if k != CHECKSUM_KEY}
        parts = []
        if meta:
            items = ",".join(f"{dumps(k)}:{dumps(v)}" for k, v in sorted(meta.items()))
            parts.append('"__metadata__":{' + items + "}")
        for name in sorted(self.entries()):
            e = self.header[name]
            shape = ",".join(str(d) for d in e["shape"])
            b, end = e["data_offsets"]
            parts.append(f'{dumps(name)}:{{"dtype":"{e["dtype"]}","shape":[{shape}],"data_offsets":[{b},{end}]}}')
        covered = ("{" + ",".join(parts) + "}").encode("utf-8")
        crc = zlib.crc32(bytes(self.data), zlib.crc32(covered))
        self.header.setdefault("__metadata__", {})[CHECKSUM_KEY] = f"{crc:08x}"
        return self

    def unseal(self):
        """Drops the checksum, as a writer that records none (or tandem before it) leaves a file."""
        self.header.get("__metadata__", {}).pop(CHECKSUM_KEY, None)
        return self

    def to_bytes(self):
        text = json.dumps(self.header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        text += b" " * ((8 - len(text) % 8) % 8)
        return struct.pack("<Q", len(text)) + text + bytes(self.data)


def dumps(s):
    return json.dumps(s, ensure_ascii=False)


def header_length(raw):
    return struct.unpack("<Q", raw[:8])[0]


def data_start(raw):
    return 8 + header_length(raw)


def flip(raw, at, mask=0x01):
    out = bytearray(raw)
    out[at] ^= mask
    return bytes(out)


def flip_in_header(raw, needle, offset=0, mask=0x01):
    """Flips a bit of the header byte at `offset` into the first occurrence of `needle`."""
    at = raw.index(needle.encode(), 8, data_start(raw))
    return flip(raw, at + offset, mask)


def flip_offset_digit(raw):
    """Flips the low bit of the second digit of the first data_offsets start of 4+ digits
    (an offset that stays a number but points elsewhere), wherever the layout puts it."""
    found = re.compile(rb'"data_offsets":\[(\d{4,}),').search(raw, 8, data_start(raw))
    if found is None:
        raise ValueError("no data_offsets entry of four or more digits in the header")
    return flip(raw, found.start(1) + 1, 0x01)


def flip_in_tensor(raw, name, last=False, byte=0, mask=0x01):
    """Flips a bit of `byte` of the first (or last) 4-byte element of tensor `name`."""
    begin, end = Checkpoint(raw).span(name)
    element = end - 4 if last else begin
    return flip(raw, data_start(raw) + element + byte, mask)


def with_length(raw, n):
    return struct.pack("<Q", n) + raw[8:]


def sealed(edit):
    """A mutant that edits the parsed checkpoint, then records a fresh checksum."""

    def apply(raw):
        ck = Checkpoint(raw)
        edit(ck)
        return ck.seal().to_bytes()

    return apply


def unsealed(edit):
    """A mutant that edits the parsed checkpoint and records no checksum."""

    def apply(raw):
        ck = Checkpoint(raw)
        edit(ck)
        return ck.unseal().to_bytes()

    return apply


def stale(edit):
    """A mutant that edits the parsed checkpoint and keeps the old checksum."""

    def apply(raw):
        ck = Checkpoint(raw)
        edit(ck)
        return ck.to_bytes()

    return apply


def set_meta(key, value):
    def edit(ck):
        ck.header["__metadata__"][key] = value

    return edit


def drop_meta(key):
    def edit(ck):
        del ck.header["__metadata__"][key]

    return edit


def drop_entry(name):
    def edit(ck):
        contents = ck.contents()
        del ck.header[name]
        ck.repack(contents)

    return edit


def rename_entry(name, new_name):
    def edit(ck):
        contents = ck.contents()
        ck.header = {(new_name if k == name else k): v for k, v in ck.header.items()}
        contents[new_name] = contents.pop(name)
        ck.repack(contents)

    return edit


def add_entry(name, dtype, shape, blob):
    def edit(ck):
        contents = ck.contents()
        ck.header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}
        contents[name] = blob
        ck.repack(contents)

    return edit


def set_value(name, index, value, fmt):
    """Writes one element of tensor `name` (struct format fmt: "<f", "<d", "<q")."""

    def edit(ck):
        begin, _ = ck.span(name)
        size = struct.calcsize(fmt)
        ck.data[begin + index * size : begin + (index + 1) * size] = struct.pack(fmt, value)

    return edit


def set_field(name, field, value):
    def edit(ck):
        ck.header[name][field] = value

    return edit


def retype(name, dtype, fmt_in, fmt_out):
    """Stores tensor `name` as another dtype, same shape, values converted."""

    def edit(ck):
        contents = ck.contents()
        blob = contents[name]
        n = len(blob) // struct.calcsize(fmt_in)
        values = struct.unpack(f"<{n}{fmt_in}", blob)
        contents[name] = struct.pack(f"<{n}{fmt_out}", *values)
        ck.header[name]["dtype"] = dtype
        ck.repack(contents)

    return edit


def overlap(ck):
    # The second tensor starts inside the first; spans stay consistent with shapes.
    a, b = "ema.0", "ema.1"
    begin, _ = ck.span(a)
    size = ck.span(b)[1] - ck.span(b)[0]
    ck.header[b]["data_offsets"] = [begin + 4, begin + 4 + size]


def past_end(ck):
    last = max(ck.entries(), key=lambda n: ck.span(n)[1])
    begin, end = ck.span(last)
    ck.header[last]["data_offsets"] = [begin + 64, end + 64]


def swap_same_size(ck):
    # Two tensors of one shape trade places: a layout that validates, data in the wrong tensor.
    a, b = "model.generator.2.weight", "model.discriminator.2.weight"
    ck.header[a]["data_offsets"], ck.header[b]["data_offsets"] = ck.span(b), ck.span(a)


def gap(ck):
    # The tensor last in the data moves 4 bytes later, leaving a hole; the file grows by 4.
    name = max(ck.entries(), key=lambda n: ck.span(n)[1])
    begin, end = ck.span(name)
    ck.data[begin:begin] = b"\0\0\0\0"
    ck.header[name]["data_offsets"] = [begin + 4, end + 4]


def mutants():
    """name -> (what it does, function raw bytes -> raw bytes)."""
    m = {}

    def add(name, what, fn):
        m[name] = (what, fn)

    # Truncations and whole-file damage.
    add("truncate-0", "empty file", lambda r: b"")
    add("truncate-7", "7 bytes: less than the length prefix", lambda r: r[:7])
    add("truncate-8", "the length prefix alone", lambda r: r[:8])
    add("truncate-header", "cut in the middle of the header", lambda r: r[: data_start(r) // 2])
    add("truncate-at-data", "the header alone, no data", lambda r: r[: data_start(r)])
    add("truncate-mid-data", "cut in the middle of the data", lambda r: r[: (data_start(r) + len(r)) // 2])
    add("truncate-last-byte", "one byte short", lambda r: r[:-1])
    add("zero-filled", "same size, all zero bytes", lambda r: bytes(len(r)))
    add("text-file", "a text file under the checkpoint's name", lambda r: b"not a checkpoint\n")
    add("append-1", "one byte appended", lambda r: r + b"\0")
    add("append-4k", "4 KiB of garbage appended", lambda r: r + bytes(range(256)) * 16)
    add("header-of-other", "the header of another checkpoint (argument OTHER) on this file's data",
        lambda r: splice_other_header(r))

    # The 8-byte length.
    add("length-flip-bit0", "header length's lowest bit flipped", lambda r: flip(r, 0, 0x01))
    add("length-flip-byte1", "header length's byte 1 flipped", lambda r: flip(r, 1, 0x10))
    add("length-flip-top", "header length's top bit flipped", lambda r: flip(r, 7, 0x80))
    add("length-plus-8", "header length 8 too big", lambda r: with_length(r, header_length(r) + 8))
    add("length-minus-8", "header length 8 too small", lambda r: with_length(r, header_length(r) - 8))
    add("length-zero", "header length 0", lambda r: with_length(r, 0))

    # Bit flips in the header JSON (the checksum left as it was).
    add("hflip-open-brace", "header's '{' flipped", lambda r: flip(r, 8, 0x04))
    add("hflip-metadata-key", "a letter of \"__metadata__\"", lambda r: flip_in_header(r, "__metadata__", 3))
    add("hflip-checksum-digit", "a digit of the recorded checksum",
        lambda r: flip_in_header(r, '"tandem.crc32":"', 16, 0x01))
    add("hflip-checksum-key", "a letter of the checksum's key", lambda r: flip_in_header(r, "tandem.crc32", 2))
    add("hflip-iteration", "iteration \"20\" -> \"21\"", lambda r: flip_in_header(r, '"iteration":"20"', 14))
    add("hflip-world-size", "world_size \"2\" -> \"3\"", lambda r: flip_in_header(r, '"world_size":"2"', 14))
    add("hflip-batch", "batch \"16\" -> \"17\"", lambda r: flip_in_header(r, '"batch":"16"', 10))
    add("hflip-seed", "seed \"3\" -> \"2\"", lambda r: flip_in_header(r, '"seed":"3"', 8))
    add("hflip-tensor-name", "a letter of a tensor's name",
        lambda r: flip_in_header(r, '"model.generator.0.weight"', 8))
    add("hflip-dtype", "dtype \"F32\" -> \"F36\"", lambda r: flip_in_header(r, '"F32"', 3, 0x04))
    add("hflip-shape", "a shape digit", lambda r: flip_in_header(r, '"shape":[128,16]', 10, 0x02))
    add("hflip-offset", "a data_offsets digit", flip_offset_digit)
    add("hflip-quote", "a quote", lambda r: flip_in_header(r, '"model.generator.0.bias"', 0, 0x01))
    add("hflip-last-byte", "the header's last byte", lambda r: flip(r, data_start(r) - 1, 0x01))

    # Bit flips in the data (the checksum left as it was).
    add("dflip-first-byte", "first data byte (discriminator lr)", lambda r: flip(r, data_start(r), 0x01))
    add("dflip-last-byte", "last data byte", lambda r: flip(r, len(r) - 1, 0x01))
    add("dflip-mid-data", "a byte in the middle of the data", lambda r: flip(r, (data_start(r) + len(r)) // 2, 0x08))
    add("dflip-weight-mantissa", "low mantissa bit of a G weight (stays finite)",
        lambda r: flip_in_tensor(r, "model.generator.2.weight"))
    add("dflip-weight-exponent", "top exponent bit of a D weight (becomes huge or Inf)",
        lambda r: flip_in_tensor(r, "model.discriminator.0.weight", byte=3, mask=0x40))
    add("dflip-weight-sign", "sign of a G bias (stays finite)",
        lambda r: flip_in_tensor(r, "model.generator.0.bias", True, byte=3, mask=0x80))
    add("dflip-moment", "an Adam first moment (stays finite)",
        lambda r: flip_in_tensor(r, "optim.generator.state.2.exp_avg", byte=1))
    add("dflip-moment-sq-sign", "sign of an Adam second moment",
        lambda r: flip_in_tensor(r, "optim.discriminator.state.1.exp_avg_sq", byte=3, mask=0x80))
    add("dflip-ema", "an average weight (stays finite)", lambda r: flip_in_tensor(r, "ema.2", True))
    add("dflip-step", "a step count", lambda r: flip_in_tensor(r, "optim.generator.state.0.step", mask=0x04))

    # Layout lies, each sealed with a fresh checksum (a writer bug, not bit rot).
    add("sealed-overlap", "two tensors' data_offsets overlap", sealed(overlap))
    add("sealed-past-end", "the last tensor's offsets past the end of the file", sealed(past_end))
    add("sealed-gap", "4 bytes that belong to no tensor", sealed(gap))
    add("sealed-bad-length", "a shape that does not match its byte span",
        sealed(set_field("ema.1", "shape", [127])))
    add("sealed-dtype-f16", "dtype F32 -> F16, offsets unchanged", sealed(set_field("ema.0", "dtype", "F16")))
    add("sealed-shape-transposed", "a weight's shape [128,16] -> [16,128], same bytes",
        sealed(set_field("model.generator.0.weight", "shape", [16, 128])))
    add("sealed-shape-flat", "a weight's shape [128,16] -> [2048]",
        sealed(set_field("model.generator.0.weight", "shape", [2048])))
    add("sealed-as-f64", "a weight stored as F64 (same values, exact)",
        sealed(retype("model.generator.0.weight", "F64", "f", "d")))
    add("sealed-as-f16", "a weight stored as F16 (values rounded)",
        sealed(retype("model.generator.0.weight", "F16", "f", "e")))
    add("stale-swap", "two same-shape weights trade data_offsets", stale(swap_same_size))

    # Entries removed, renamed, added (sealed).
    add("drop-model-entry", "\"model.discriminator.2.weight\" removed", sealed(drop_entry("model.discriminator.2.weight")))
    add("drop-optim-moment", "an Adam moment removed", sealed(drop_entry("optim.generator.state.1.exp_avg_sq")))
    add("drop-optim-step", "an Adam step removed", sealed(drop_entry("optim.discriminator.state.0.step")))
    add("drop-optim-lr", "G's learning rate removed", sealed(drop_entry("optim.generator.lr")))
    add("drop-ema-entry", "\"ema.3\" removed", sealed(drop_entry("ema.3")))
    add("rename-model-entry", "a model entry renamed",
        sealed(rename_entry("model.generator.4.bias", "model.generator.5.bias")))
    add("rename-optim-entry", "an optimizer entry renamed to another parameter's index",
        sealed(rename_entry("optim.generator.state.5.exp_avg", "optim.generator.state.6.exp_avg")))
    add("rename-ema-entry", "\"ema.5\" -> \"ema.6\"", sealed(rename_entry("ema.5", "ema.6")))
    add("extra-model-entry", "an unknown model entry added",
        sealed(add_entry("model.generator.9.weight", "F32", [2], b"\0" * 8)))

    # Metadata mangled (sealed).
    add("meta-iteration-text", "iteration \"2x\"", sealed(set_meta("iteration", "2x")))
    add("meta-iteration-negative", "iteration \"-20\"", sealed(set_meta("iteration", "-20")))
    add("meta-iteration-float", "iteration \"20.0\"", sealed(set_meta("iteration", "20.0")))
    add("meta-iteration-huge", "iteration past 64 bits", sealed(set_meta("iteration", "99999999999999999999")))
    add("meta-iteration-empty", "iteration \"\"", sealed(set_meta("iteration", "")))
    add("meta-iteration-missing", "no iteration", sealed(drop_meta("iteration")))
    add("meta-world-size-3", "world_size \"3\"", sealed(set_meta("world_size", "3")))
    add("meta-world-size-0", "world_size \"0\"", sealed(set_meta("world_size", "0")))
    add("meta-batch-17", "batch \"17\"", sealed(set_meta("batch", "17")))
    add("meta-batch-text", "batch \" 16\"", sealed(set_meta("batch", " 16")))
    add("meta-model-other", "model \"mlp\"", sealed(set_meta("model", "mlp")))
    add("meta-model-missing", "no model", sealed(drop_meta("model")))
    add("meta-none", "no metadata at all", sealed(lambda ck: ck.header.pop("__metadata__")))

    # Values a checkpoint must not hold (sealed, then once without a checksum).
    add("nan-weight", "NaN in a G weight", sealed(set_value("model.generator.2.weight", 5, math.nan, "<f")))
    add("inf-bias", "-Inf in a D bias", sealed(set_value("model.discriminator.0.bias", 0, -math.inf, "<f")))
    add("nan-ema", "NaN in the average", sealed(set_value("ema.4", 1, math.nan, "<f")))
    add("inf-moment", "Inf in an Adam first moment",
        sealed(set_value("optim.discriminator.state.2.exp_avg", 3, math.inf, "<f")))
    add("negative-moment-sq", "a negative Adam second moment",
        sealed(set_value("optim.generator.state.0.exp_avg_sq", 0, -1.0, "<f")))
    add("lr-nan", "G's learning rate NaN", sealed(set_value("optim.generator.lr", 0, math.nan, "<d")))
    add("lr-zero", "D's learning rate 0", sealed(set_value("optim.discriminator.lr", 0, 0.0, "<d")))
    add("lr-negative", "G's learning rate -2e-4", sealed(set_value("optim.generator.lr", 0, -2e-4, "<d")))
    add("step-negative", "an Adam step -1", sealed(set_value("optim.generator.state.3.step", 0, -1, "<q")))
    add("nan-weight-no-checksum", "NaN in a G weight, no checksum recorded",
        unsealed(set_value("model.generator.2.weight", 5, math.nan, "<f")))

    # Files that are fine.
    add("no-checksum", "checksum removed, nothing else changed (an older checkpoint)", unsealed(lambda ck: None))
    add("resealed", "rewritten and sealed, nothing else changed", sealed(lambda ck: None))
    return m


OTHER = None  # path of another checkpoint of the run, for header-of-other


def splice_other_header(raw):
    with open(OTHER, "rb") as f:
        other = f.read()
    return other[: data_start(other)] + raw[data_start(raw) :]


def main(argv):
    global OTHER
    if len(argv) >= 2 and argv[1] == "list":
        for name, (what, _) in mutants().items():
            print(f"{name}\t{what}")
        return 0
    if len(argv) in (5, 6) and argv[1] == "apply":
        name, src, dst = argv[2], argv[3], argv[4]
        OTHER = argv[5] if len(argv) == 6 else src
        table = mutants()
        if name not in table:
            print(f"fault_mutate.py: unknown mutant '{name}' (see: fault_mutate.py list)", file=sys.stderr)
            return 2
        with open(src, "rb") as f:
            raw = f.read()
        out = table[name][1](raw)
        with open(dst, "wb") as f:
            f.write(out)
        return 0
    print("usage: fault_mutate.py list | apply NAME SRC DST [OTHER]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
