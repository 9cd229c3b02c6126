// Runs a TF.js graph model export on frames, with TF.js's cpu backend, in Node.
// sleap-live's TF.js export verifies itself with this script (engines/export/tfjs.py).
//
//   node run.js MODEL_DIR FRAMES N H W C OUT_DIR NAMES NODE_MODULES
//
// FRAMES: N uint8 frames (H, W, C) one after another; NAMES: the outputs to read,
// comma-separated, as the model's signature names them. Writes OUT_DIR/I_J.bin (frame I's
// output J: float32, int32, or bool as one byte) and OUT_DIR/outputs.json (each output's
// shape and dtype). The TF.js packages are loaded from NODE_MODULES by path (the folder
// sleap-live checked), never looked up by name in other folders.
const fs = require("fs");
const path = require("path");
const modules = process.argv[10];
const tf = require(path.join(modules, "@tensorflow", "tfjs-core"));
require(path.join(modules, "@tensorflow", "tfjs-backend-cpu"));
const converter = require(path.join(modules, "@tensorflow", "tfjs-converter"));

async function main() {
  const [dir, framesPath, n, h, w, c, outDir, names] = process.argv.slice(2);
  const model = JSON.parse(fs.readFileSync(path.join(dir, "model.json")));
  const specs = [];
  const buffers = [];
  for (const group of model.weightsManifest) {
    for (const file of group.paths) buffers.push(fs.readFileSync(path.join(dir, file)));
    specs.push(...group.weights);
  }
  const weights = Buffer.concat(buffers);
  await tf.setBackend("cpu");
  const graph = await converter.loadGraphModel(
    tf.io.fromMemory({
      modelTopology: model.modelTopology,
      weightSpecs: specs,
      weightData: weights.buffer.slice(weights.byteOffset, weights.byteOffset + weights.byteLength),
      format: model.format,
      generatedBy: model.generatedBy,
      convertedBy: model.convertedBy,
      signature: model.signature,
      userDefinedMetadata: model.userDefinedMetadata,
    }),
  );
  const signature = model.signature;
  const input = Object.values(signature.inputs)[0].name;
  const keys = names.split(",");
  const nodes = keys.map((key) => signature.outputs[key].name);
  const frames = fs.readFileSync(framesPath);
  const size = h * w * c;
  const outputs = {};
  for (let i = 0; i < n; i++) {
    // TF.js has no uint8 tensors: the frame's values go in as int32.
    const values = Int32Array.from(frames.subarray(i * size, (i + 1) * size));
    const x = tf.tensor(values, [1, +h, +w, +c], "int32");
    const results = graph.execute({ [input]: x }, nodes);
    for (let j = 0; j < results.length; j++) {
      const data = await results[j].data();
      const bytes =
        results[j].dtype === "bool"
          ? Buffer.from(Uint8Array.from(data))
          : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      fs.writeFileSync(path.join(outDir, `${i}_${j}.bin`), bytes);
      outputs[keys[j]] = { shape: results[j].shape, dtype: results[j].dtype };
    }
    // Only the input is disposed: an output may be one of the model's own tensors.
    x.dispose();
  }
  fs.writeFileSync(path.join(outDir, "outputs.json"), JSON.stringify({ names: keys, outputs }));
}

main().catch((error) => {
  console.error(String((error && error.message) || error).split("\n")[0]);
  process.exit(1);
});
