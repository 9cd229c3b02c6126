"""What a run leaves behind: pose files, recordings, their journals and provenance.

`writers` opens the outputs a pipeline's `OutputOptions` ask for and feeds them; each
is an `Output` (see `base`): it takes pose records and frames, then closes (saving)
or discards.
"""
