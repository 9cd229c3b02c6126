"""Many recorded videos, an output each: in this process, local workers or Ray.

`run_many` is the entry point (`sleap_live.run_many`, `sleap-live run DIR`):
`videos` finds the videos and names the outputs, `worker` processes one video,
`finish` makes an output appear only once complete, `local` runs workers in this
process or in worker processes, `cluster` on Ray, `display` shows the progress and
the summary.
"""

from sleap_live.stream.many.run import DEFAULT_RETRIES, DEFAULT_STREAMS, ManyResult, run_many
from sleap_live.stream.many.videos import DEFAULT_NAME_PATTERN, VideoJob, VideoListError
from sleap_live.stream.many.worker import VideoResult, WorkOptions

__all__ = [
    "DEFAULT_NAME_PATTERN",
    "DEFAULT_RETRIES",
    "DEFAULT_STREAMS",
    "ManyResult",
    "VideoJob",
    "VideoListError",
    "VideoResult",
    "WorkOptions",
    "run_many",
]
