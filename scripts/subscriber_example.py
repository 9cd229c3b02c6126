"""Receive the poses `sleap-live ... --publish ENDPOINT` sends, with only pyzmq and msgpack.

    python scripts/subscriber_example.py tcp://127.0.0.1:5555 [--topic poses] [--count N]

Start it before or after sleap-live; a subscriber gets the messages sent after its
subscription reached the publisher (ZeroMQ drops the ones before, and the ones a
slow subscriber has no room for). Prints a line per frame and, at the end (after
`--count` messages, or Ctrl-C), how many it received and how many it missed: the
gaps in the messages' `sequence`, which numbers a run's frames from 0.

Every message has two parts: the topic ``poses/<source id>`` (subscribe to a
prefix of it: ``poses`` for every source) and one msgpack map (see docs/outputs.md,
"Poses to other programs").
"""

from __future__ import annotations

import argparse
import time

import msgpack
import zmq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("endpoint", help="where sleap-live publishes, e.g. tcp://127.0.0.1:5555")
    parser.add_argument("--topic", default="poses", help="topic prefix to subscribe to")
    parser.add_argument("--count", type=int, help="stop after this many messages")
    args = parser.parse_args()

    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    socket.connect(args.endpoint)
    socket.subscribe(args.topic.encode())
    received = missed = 0
    last_sequence = None
    try:
        while args.count is None or received < args.count:
            topic, payload = socket.recv_multipart()
            message = msgpack.unpackb(payload)
            arrived = time.monotonic()
            sequence = message["sequence"]
            if last_sequence is not None and sequence > last_sequence:
                missed += sequence - last_sequence - 1
            # A sequence that goes back is a new run: count from there.
            last_sequence = sequence
            received += 1
            # points: instances x nodes x [x, y], NaN where a node was not found.
            first_nodes = [
                f"({instance[0][0]:.1f}, {instance[0][1]:.1f})" for instance in message["points"]
            ]
            # On the same Linux machine, time.monotonic() reads the clock sleap-live
            # stamps capture_time and ready_time with.
            print(
                f"{topic.decode()} frame {message['frame_index']}: "
                f"{len(message['points'])} instances, {message['node_names'][0]} at "
                f"{' '.join(first_nodes) or '-'}, tracks {message['track_ids']}, "
                f"{(arrived - message['ready_time']) * 1e3:.2f} ms after the poses were ready",
                flush=True,
            )
    except KeyboardInterrupt:
        pass
    finally:
        print(f"received {received} messages, missed {missed}", flush=True)
        # destroy, not term: after a Ctrl-C during recv, term raises it once more.
        context.destroy(linger=0)


if __name__ == "__main__":
    main()
