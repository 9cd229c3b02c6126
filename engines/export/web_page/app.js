// The page of a `sleap-live export --format web` folder: the exported graph of the
// frames' size (graphs/HxW.onnx, see model.json) on onnxruntime-web, vendored in ort/,
// on the webcam or a video file. Frames go in as uint8 (1, H, W, C) with the model's
// channel count, converted as sleap-live's host converts them; the instance list that
// comes out is drawn in the colours of the preview and overlays. Everything the page
// needs lies in this folder: it runs offline (serve-web serves it).
import * as ort from "./ort/ort.webgpu.min.mjs";

const RECENT = 100; // model runs the latency percentiles are taken over
const canvas = document.getElementById("view");
const context = canvas.getContext("2d", { willReadFrequently: true });
const video = document.getElementById("video");
const kept = []; // {frame, time, instances} of every frame processed, for the downloads
const latencies = [];
const finishedAt = [];
let model = null; // model.json: skeleton, palette, graphs by frame size, input
let backend = null;
const sessions = new Map(); // "HxW" -> the promise of its graph's session
let stopSource = null;

function text(id, value) { document.getElementById(id).textContent = value; }
function enable(...ids) { for (const id of ids) document.getElementById(id).disabled = false; }

function status(message, isError = false) {
  const element = document.getElementById("status");
  element.textContent = message;
  element.className = isError ? "error" : "";
}

function percentile(values, share) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(share * sorted.length))];
}

// RGBA pixels to the (1, H, W, C) uint8 tensor of the graph. A graph that takes
// 3 channels gets RGB; one that takes only grey gets sleap-live's luma, each product
// and sum rounded to float32 and the result truncated, as the host converts frames.
function frameTensor(rgba, width, height) {
  const channels = model.input_channels;
  const pixels = width * height;
  const data = new Uint8Array(pixels * channels);
  if (channels === 3) {
    for (let i = 0; i < pixels; i++) {
      data[3 * i] = rgba[4 * i];
      data[3 * i + 1] = rgba[4 * i + 1];
      data[3 * i + 2] = rgba[4 * i + 2];
    }
  } else {
    const [red, green, blue] = model.gray_weights;
    for (let i = 0; i < pixels; i++) {
      let gray = Math.fround(rgba[4 * i] * red);
      gray = Math.fround(gray + rgba[4 * i + 1] * green);
      gray = Math.fround(gray + rgba[4 * i + 2] * blue);
      data[i] = Math.trunc(gray);
    }
  }
  return new ort.Tensor("uint8", data, [1, height, width, channels]);
}

// The frame's instances from the graph's instance list: those of frame 0 of the
// batch, in the graph's order, without instances that found no node (as sleap-live's
// host decoding drops them). Points are [x, y] or null where a node was not found.
function instancesOf(outputs) {
  const frameOf = outputs.instance_frame.data;
  const points = outputs.points.data;
  const pointScores = outputs.point_scores.data;
  const scores = outputs.instance_scores.data;
  const nodes = model.nodes.length;
  const instances = [];
  for (let i = 0; i < frameOf.length; i++) {
    if (Number(frameOf[i]) !== 0) continue;
    const instancePoints = [];
    const instanceScores = [];
    for (let n = 0; n < nodes; n++) {
      const x = points[(i * nodes + n) * 2], y = points[(i * nodes + n) * 2 + 1];
      const found = !Number.isNaN(x) && !Number.isNaN(y);
      instancePoints.push(found ? [x, y] : null);
      instanceScores.push(found ? pointScores[i * nodes + n] : null);
    }
    if (instancePoints.every((point) => point === null)) continue;
    instances.push({ points: instancePoints, point_scores: instanceScores, score: scores[i], track: -1 });
  }
  return instances;
}

// The session of the graph for width x height frames, made on first use; a size the
// export holds no graph for is refused in one line.
function sessionFor(width, height) {
  const size = `${height}x${width}`;
  if (!(size in model.graphs)) {
    throw new Error(`these frames are ${size} (HxW); this export runs ${Object.keys(model.graphs).join(", ")}: `
      + `export again with --frame-size ${size}`);
  }
  if (!sessions.has(size)) {
    sessions.set(size, ort.InferenceSession.create(model.graphs[size], { executionProviders: [backend] }));
  }
  return sessions.get(size);
}

async function estimate(rgba, width, height) {
  const session = await sessionFor(width, height);
  const started = performance.now();
  const outputs = await session.run({ [model.input_name]: frameTensor(rgba, width, height) });
  const instances = instancesOf(outputs);
  const spent = performance.now() - started;
  latencies.push(spent);
  if (latencies.length > RECENT) latencies.shift();
  return instances;
}

function showFigures(frameIndex, time, instances) {
  const now = performance.now();
  finishedAt.push(now);
  while (finishedAt.length && finishedAt[0] < now - 1000) finishedAt.shift();
  // Frames processed so far, and where in the video the last one is: the page takes
  // the newest frame whenever the model is free, so the two differ.
  text("frame-index", frameIndex + 1);
  text("video-time", time === null ? "—" : time.toFixed(2));
  text("fps", finishedAt.length.toFixed(1));
  text("latency-p50", percentile(latencies, 0.5).toFixed(1) + " ms");
  text("latency-p99", percentile(latencies, 0.99).toFixed(1) + " ms");
  text("instances", instances.length);
  text("frames-kept", kept.length);
}

// One frame through the page: the pixels already on the canvas are the frame; its
// poses are estimated, drawn over it, kept for the downloads and counted.
async function processCanvas(frameIndex, time) {
  const { width, height } = canvas;
  const rgba = context.getImageData(0, 0, width, height).data;
  const instances = await estimate(rgba, width, height);
  drawSkeletons(context, instances, model.edges, model.palette, width);
  kept.push({ frame: frameIndex, time, instances });
  showFigures(frameIndex, time, instances);
  return instances;
}

function fitCanvas(width, height) {
  if (canvas.width !== width || canvas.height !== height) {
    canvas.width = width;
    canvas.height = height;
  }
}

// Plays the video element's frames through the page, newest frame first (a slow
// model skips frames rather than falling behind), until the source ends or is stopped.
function play(label, cleanUp) {
  let running = true;
  let frameIndex = 0;
  if (stopSource) stopSource();
  stopSource = () => {
    running = false;
    video.pause();
    video.onended = null;
    cleanUp();
    stopSource = null;
  };
  // The last frame's callback may never come: the end is said here.
  video.onended = () => { if (stopSource) stopSource(); status(`${label}: ended`); };
  enable("stop");
  status(`running on ${label}`);
  const step = async (_, frameInfo) => {
    if (!running) return;
    fitCanvas(video.videoWidth, video.videoHeight);
    context.drawImage(video, 0, 0);
    try {
      await processCanvas(frameIndex++, frameInfo ? frameInfo.mediaTime : video.currentTime);
    } catch (error) {
      status(error.message, true);
      stopSource();
      return;
    }
    if (running) video.requestVideoFrameCallback(step);
  };
  video.requestVideoFrameCallback(step);
  // A play() cut short by a pause or another source rejects with an AbortError:
  // expected when the user stops or chooses another file, not an error.
  video.play().catch((error) => { if (error.name !== "AbortError") status(error.message, true); });
}

async function startWebcam() {
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ video: true, audio: false });
  } catch (error) {
    status(`no webcam: ${error.message}`, true);
    return;
  }
  video.srcObject = stream;
  play("the webcam", () => { for (const track of stream.getTracks()) track.stop(); });
}

function startFile(file) {
  const url = URL.createObjectURL(file);
  video.srcObject = null;
  video.src = url;
  play(file.name, () => URL.revokeObjectURL(url));
}

function download(name, type, body) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([body], { type }));
  link.download = name;
  link.click();
  URL.revokeObjectURL(link.href);
}

function posesJson() {
  return JSON.stringify({ model: model.name, nodes: model.nodes, frames: kept });
}

// One row per frame and instance: x, y and score of every node (empty where not found).
function posesCsv() {
  const columns = ["frame", "time", "instance", "score"];
  for (const node of model.nodes) columns.push(`${node}.x`, `${node}.y`, `${node}.score`);
  const rows = [columns.join(",")];
  for (const { frame, time, instances } of kept) {
    instances.forEach((instance, index) => {
      const row = [frame, time, index, instance.score];
      instance.points.forEach((point, node) => {
        row.push(point ? point[0] : "", point ? point[1] : "", instance.point_scores[node] ?? "");
      });
      rows.push(row.join(","));
    });
  }
  return rows.join("\n") + "\n";
}

function showLegend() {
  const legend = document.getElementById("legend");
  legend.replaceChildren(...model.nodes.map((node) => {
    const item = document.createElement("span");
    item.textContent = node + " ";
    return item;
  }));
}

// wasm runs every operator and matches ONNX Runtime (scripts/check_web_export.py), so
// it is the default. ?backend=webgpu asks for WebGPU: it starts on Chromium's
// SwiftShader adapter but its poses differed from ONNX Runtime's there, so the page
// says so beside it. The graph of the first size is loaded to find out.
async function chooseBackend() {
  const asked = new URLSearchParams(location.search).get("backend");
  const order = asked ? [asked] : ["wasm"];
  const [size, path] = Object.entries(model.graphs)[0];
  const failures = [];
  for (const candidate of order) {
    try {
      const session = await ort.InferenceSession.create(path, { executionProviders: [candidate] });
      sessions.set(size, Promise.resolve(session));
      return { chosen: candidate, failures };
    } catch (error) {
      failures.push(`${candidate}: ${error.message}`);
    }
  }
  throw new Error(failures.join("; "));
}

async function start() {
  ort.env.wasm.wasmPaths = new URL("./ort/", import.meta.url).href;
  model = await (await fetch("model.json")).json();
  text("model-name", model.name);
  showLegend();
  const { chosen, failures } = await chooseBackend();
  backend = chosen;
  const caution = backend === "webgpu" ? " (not verified: differed from ONNX Runtime on SwiftShader)" : "";
  text("backend", (failures.length ? `${backend} (${failures.join("; ")})` : backend) + caution);
  document.getElementById("webcam").onclick = startWebcam;
  document.getElementById("file").onchange = (event) => {
    if (event.target.files.length) startFile(event.target.files[0]);
  };
  document.getElementById("stop").onclick = () => { if (stopSource) stopSource(); status("stopped"); };
  document.getElementById("download-json").onclick = () =>
    download("poses.json", "application/json", posesJson());
  document.getElementById("download-csv").onclick = () =>
    download("poses.csv", "text/csv", posesCsv());
  enable("webcam", "file", "download-json", "download-csv");
  status(`ready: choose the webcam or a video file (frames of ${Object.keys(model.graphs).join(", ")})`);
  return backend;
}

// What scripts and tests drive: `ready` (the backend taken), and one frame of raw
// RGBA pixels (base64) through the same steps as a video frame.
window.sleapLive = {
  ready: start().catch((error) => { status(`cannot start: ${error.message}`, true); throw error; }),
  async processRgba(base64, width, height, frameIndex) {
    const bytes = Uint8ClampedArray.from(atob(base64), (c) => c.charCodeAt(0));
    fitCanvas(width, height);
    context.putImageData(new ImageData(bytes, width, height), 0, 0);
    return processCanvas(frameIndex, null);
  },
  posesJson,
  posesCsv,
};
