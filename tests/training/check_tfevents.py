"""Checks a TensorBoard event file written by write_tfevents.cpp, independently of tandem's
writer: every TFRecord's length and masked CRC-32C (a bitwise CRC-32C written here), the
first event's file version, every scalar against the values write_tfevents logged
(recomputed here, rounded to float32 as TensorBoard stores them) and against metrics.jsonl,
and each image's bytes and size against its PNG file.

    check_tfevents.py <dir written by write_tfevents> <dir holding tensorboard_event_pb2.py>
"""
import glob
import json
import os
import socket
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    raw = open(path, "rb").read()
    at = 0
    while at < len(raw):
        header = raw[at:at + 8]
        if len(header) != 8:
            fail(f"{path}: a torn length at byte {at}")
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", raw[at + 8:at + 12])
        if length_crc != masked(header):
            fail(f"{path}: record at byte {at}: length CRC {length_crc:#x}, expected {masked(header):#x}")
        data = raw[at + 12:at + 12 + length]
        if len(data) != length:
            fail(f"{path}: record at byte {at}: {len(data)} bytes of data, the length says {length}")
        (data_crc,) = struct.unpack("<I", raw[at + 12 + length:at + 16 + length])
        if data_crc != masked(data):
            fail(f"{path}: record at byte {at}: data CRC {data_crc:#x}, expected {masked(data):#x}")
        yield data
        at += 16 + length


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def fail(message):
    print("check_tfevents: FAIL: " + message)
    sys.exit(1)


def read_events(path, pb):
    """The file's events, checking the first is file_version brain.Event:2, and the values of
    the others: {(tag, step): simple_value} and {(tag, step): image}."""
    events = []
    for data in records(path):
        event = pb.Event()
        event.ParseFromString(data)
        events.append(event)
    if not events or events[0].file_version != "brain.Event:2":
        fail("the first event is not file_version brain.Event:2")
    scalars, images = {}, {}
    for event in events[1:]:
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                scalars[(value.tag, event.step)] = value.simple_value
            elif kind == "image":
                images[(value.tag, event.step)] = value.image
            else:
                fail(f"an unexpected value {value}")
    return events, scalars, images


def main():
    work, pb2_dir = sys.argv[1], sys.argv[2]
    sys.path.insert(0, pb2_dir)
    import tensorboard_event_pb2 as pb

    files = glob.glob(os.path.join(work, "tb", "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"expected one event file in {work}/tb, found {files}")
    name = os.path.basename(files[0]).split(".")
    if name[3:4] == [] or not name[3].isdigit() or ".".join(name[4:]) != socket.gethostname():
        fail(f"{files[0]}: not events.out.tfevents.<unix seconds>.<hostname>")
    events, scalars, images = read_events(files[0], pb)

    expected = {}
    for i in (10, 20, 30):
        expected[("loss_d", i)] = 1.0 / 3.0 + i
        expected[("loss_g", i)] = -i / 7.0
        expected[("lr", i)] = 2e-4 / 2 ** (i // 10 - 1)
    for step in range(3):
        expected[("direct", step)] = step / 2 + 0.1
    if set(scalars) != set(expected):
        fail(f"scalars {sorted(scalars)}, expected {sorted(expected)}")
    for key, value in expected.items():
        if scalars[key] != f32(value):
            fail(f"{key}: {scalars[key]!r}, expected float32({value!r}) = {f32(value)!r}")
    logged = 0
    with open(os.path.join(work, "metrics.jsonl")) as lines:
        for line in lines:
            row = json.loads(line)
            step = row.pop("iteration")
            for tag, value in row.items():
                logged += 1
                got = scalars.get((tag, step))
                if got is None or abs(got - value) > 1e-5 * max(abs(value), 1e-30):
                    fail(f"metrics.jsonl {tag} at {step}: {value}, the event file {got}")
    if logged != 9:
        fail(f"metrics.jsonl holds {logged} values, expected 9")

    for tag, step, png, height, width, colorspace in (("samples", 30, "grid.png", 3, 5, 3),
                                                      ("gray", 31, "gray.png", 2, 4, 1)):
        image = images.get((tag, step))
        if image is None:
            fail(f"no image {tag} at step {step}")
        if image.encoded_image_string != open(os.path.join(work, png), "rb").read():
            fail(f"image {tag}: the bytes are not {png}'s")
        if (image.height, image.width, image.colorspace) != (height, width, colorspace):
            fail(f"image {tag}: {image.height}x{image.width} colorspace {image.colorspace}, "
                 f"expected {height}x{width} colorspace {colorspace}")
    if len(events) != 1 + 3 + 3 + 2:
        fail(f"{len(events)} events, expected 9")
    print(f"check_tfevents: ok ({len(events)} records, {len(scalars)} scalars, {len(images)} images)")


if __name__ == "__main__":
    main()
