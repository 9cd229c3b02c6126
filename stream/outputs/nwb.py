"""Predicted poses to an NWB file with ndx-pose, laid out as sleap-io writes and reads it.

sleap-io's own predictions writer (0.9.5) stores a node's series by a rate when
its frames are evenly spaced and truncates that rate to a whole number, so a
track seen in every other frame reads back at the wrong frames, and it times
every frame by its row among the frames with data, not by its index. This
writer builds the same containers with sleap-io's helpers (one processing module
``SLEAP_VIDEO_000_<video stem>``, the skeleton in ``behavior/Skeletons``, one
``PoseEstimation`` named ``track=<name>`` per track, one ``PoseEstimationSeries``
per node) but gives every series explicit timestamps: frame index / fps, in
seconds (frame index where the fps is unknown), so `sleap_io.load_nwb` reads it.
"""

from __future__ import annotations

import datetime
import uuid
import warnings
from pathlib import Path

import numpy as np
import sleap_io as sio
from ndx_pose import PoseEstimation, PoseEstimationSeries
from pynwb import NWBHDF5IO, NWBFile
from sleap_io.io.nwb_predictions import (
    create_skeleton_container,
    get_processing_module_for_video,
)

REFERENCE_FRAME = (
    "(x, y) in pixels from the top-left of the image; (0, 0) is the centre of the top-left pixel"
)


def write_nwb_poses(labels: sio.Labels, path: Path, *, notes: str, software_version: str) -> None:
    """Write the predictions of `labels` (one video, one skeleton, every instance on a
    track) to the NWB file `path`; `notes` (the provenance) goes in the file's notes
    and each ``PoseEstimation``'s scorer."""
    video = labels.videos[0]
    skeleton = labels.skeletons[0]
    fps = video.backend_metadata.get("fps") or 1.0
    nwbfile = NWBFile(
        session_description=f"sleap-live poses of {video.filename}",
        identifier=str(uuid.uuid4()),
        session_start_time=datetime.datetime.now(datetime.timezone.utc),
        notes=notes,
    )
    nwb_skeleton = create_skeleton_container(labels, nwbfile)[skeleton.name]
    module = get_processing_module_for_video(
        f"SLEAP_VIDEO_000_{Path(video.filename).stem}", nwbfile
    )
    device = nwbfile.create_device(name="camera_0", description=f"the camera of {video.filename}")
    frames = sorted(labels.labeled_frames, key=lambda frame: frame.frame_idx)
    for track in labels.tracks:
        rows = [
            (frame.frame_idx, instance.numpy(scores=True))
            for frame in frames
            for instance in frame.instances
            if instance.track is track
        ]
        series = []
        for node_index, node in enumerate(skeleton.nodes):
            found = [(index, points[node_index]) for index, points in rows]
            found = [(index, point) for index, point in found if np.isfinite(point[:2]).all()]
            series.append(
                PoseEstimationSeries(
                    name=node.name,
                    description=f"{node.name} of {track.name}",
                    data=np.array([point[:2] for _, point in found], np.float64).reshape(-1, 2),
                    unit="pixels",
                    reference_frame=REFERENCE_FRAME,
                    timestamps=np.array([index / fps for index, _ in found], np.float64),
                    confidence=np.array([point[2] for _, point in found], np.float64),
                    confidence_definition="peak confidence of the node",
                )
            )
        with warnings.catch_warnings():
            # sleap-io's reader needs the older video fields ndx-pose deprecates.
            warnings.simplefilter("ignore", DeprecationWarning)
            module.add(
                PoseEstimation(
                    name=f"track={track.name}",
                    description=f"{skeleton.name} poses of {track.name} in {video.filename}",
                    pose_estimation_series=series,
                    skeleton=nwb_skeleton,
                    source_software="sleap-live",
                    source_software_version=software_version,
                    scorer=notes,
                    original_videos=[video.filename],
                    labeled_videos=[video.filename],
                    devices=[device],
                )
            )
    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwbfile)
