"""Tracking: which animal is which from one frame to the next, as sleap-nn tracks them."""

from sleap_live.stream.tracking.classic import UNTRACKED, ClassicTracker, Tracked
from sleap_live.stream.tracking.settings import TrackingSettings

__all__ = ["UNTRACKED", "ClassicTracker", "Tracked", "TrackingSettings"]
