"""Export sleap-live inference models, verified on frames with animals.

`export_model(models, output, format=...)` is the one public function, for every
format `sleap-live export` offers (`formats`: the one table of formats, each row naming
its exporter). The parts, one job each:

- `exporter`: the ONNX and TorchScript export of an inference model and its steps
  (its in-memory graphs are what `load_runner` runs model directories on);
- `driver`: the steps every other format shares (output rule, loading, refusals,
  slots, the reference ONNX graph, frames, metadata, staged save, verification), and
  the `ExportFormat` record each of `pt2`, `tflite`, `coreml`, `saved_model`, `tfjs`,
  `openvino` and `web` is;
- `onnx`: tracing to ONNX and embedding the metadata;
- `torchscript`: TorchScript tracing, saving, and loading exports to run;
- `verify`: the numerical comparison of an export with its torch module;
- `frames`: which frames the verification runs on;
- `tf_graph`, `tf_ops`: a torch.export program as TensorFlow operations, one form per
  ATen operation (`saved_model`, `tfjs`);
- `tensorrt*`: the TensorRT engines;
- `on_demand`, `tensorrt_on_demand`: exports and engines made while a model loads,
  kept in the export cache.

Importing this package loads neither torch nor an export library.
"""

from sleap_live.engines.export.formats import DEFAULT_OPSET, EXPORT_FORMATS, export_model

__all__ = ["DEFAULT_OPSET", "EXPORT_FORMATS", "export_model"]
