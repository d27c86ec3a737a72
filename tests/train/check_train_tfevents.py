"""Checks the TensorBoard event files of a tandem-train run (--tensorboard) against the run's
own files, with check_tfevents.py's record reader (length and masked CRC-32C of every
record): --files N event files (default 1: rank 0's alone; a resumed run adds one), each
with the file version first, no value logged twice for one step across them, at every log point of
metrics.jsonl (the lines with loss_d) a scalar for each of its values but rss_mb, equal to
it (metrics.jsonl holds 6 significant digits and bytes_per_step cut to an integer; the
event file float32), no other scalars, and at each given sample step an image "samples" holding the PNG's bytes,
with its height, width and colorspace from the PNG's header.

    check_train_tfevents.py <tensorboard dir> <metrics.jsonl> <dir holding tensorboard_event_pb2.py>
                            [--files N] <step>=<png> ...
"""
import glob
import json
import os
import struct
import sys

# The toolkit's record reader (tests/training/check_tfevents.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "training"))
from check_tfevents import fail, read_events  # noqa: E402

# PNG colour type -> TensorBoard colorspace (gray, gray + alpha, RGB, RGBA).
COLORSPACE = {0: 1, 4: 2, 2: 3, 6: 4}


def main():
    tb_dir, metrics, pb2_dir = sys.argv[1:4]
    rest = sys.argv[4:]
    expected_files = 1
    if rest[:1] == ["--files"]:
        expected_files, rest = int(rest[1]), rest[2:]
    samples = {int(step): png for step, png in (arg.split("=", 1) for arg in rest)}
    sys.path.insert(0, pb2_dir)
    import tensorboard_event_pb2 as pb

    files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    if len(files) != expected_files:
        fail(f"expected {expected_files} event file(s) in {tb_dir} (rank 0's), found {files}")
    events, scalars, images = [], {}, {}
    for path in files:
        file_events, file_scalars, file_images = read_events(path, pb)
        events += file_events
        for key in list(file_scalars) + list(file_images):
            if key in scalars or key in images:
                fail(f"{key[0]} at step {key[1]} is logged twice (again in {path})")
        scalars.update(file_scalars)
        images.update(file_images)

    logged = set()
    with open(metrics) as lines:
        for line in lines:
            row = json.loads(line)
            if "loss_d" not in row:
                continue  # a ring8 run's final quality line: not a log point
            step = row.pop("iteration")
            row.pop("rss_mb", None)
            for tag, value in row.items():
                logged.add((tag, step))
                got = scalars.get((tag, step))
                slack = 1.0 if tag == "bytes_per_step" else 0.0
                if got is None or abs(got - value) > 1e-5 * abs(value) + slack:
                    fail(f"metrics.jsonl {tag} at {step}: {value}, the event file {got}")
    if not any(tag == "loss_d" for tag, _ in logged):
        fail(f"{metrics} logs no loss_d")
    if set(scalars) != logged:
        fail(f"scalars {sorted(set(scalars) - logged)} are not in metrics.jsonl, "
             f"{sorted(logged - set(scalars))} missing")

    for step, png in samples.items():
        image = images.get(("samples", step))
        if image is None:
            fail(f"no image 'samples' at step {step}")
        raw = open(png, "rb").read()
        if image.encoded_image_string != raw:
            fail(f"image 'samples' at {step}: the bytes are not {png}'s")
        width, height = struct.unpack(">II", raw[16:24])
        expected = (height, width, COLORSPACE.get(raw[25]))
        if (image.height, image.width, image.colorspace) != expected:
            fail(f"image 'samples' at {step}: {image.height}x{image.width} colorspace {image.colorspace}, "
                 f"expected {expected[0]}x{expected[1]} colorspace {expected[2]}")
    if set(images) != {("samples", step) for step in samples}:
        fail(f"images {sorted(images)}, expected samples at {sorted(samples)}")
    print(f"check_train_tfevents: ok ({len(events)} records, {len(scalars)} scalars, {len(images)} images)")


if __name__ == "__main__":
    main()
