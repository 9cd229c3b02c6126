"use strict";
// Skeletons drawn over a frame on a 2D canvas, for the web export's page and the live
// preview (which inlines this file): coloured by track where the model names
// identities, else by instance, from the palette of `sleap-live render` and overlay
// recordings; lines and dots scaled with the frame's width.

function skeletonColour(instance, position, palette) {
  const key = instance.track >= 0 ? instance.track : position;
  return palette[key % palette.length];
}

// `instances`: [{points: [[x, y] or null per node], track}], `edges`: [[a, b]] node
// indices, `frameWidth`: the frame's width in pixels.
function drawSkeletons(context, instances, edges, palette, frameWidth) {
  const lineWidth = Math.max(1, frameWidth / 320);
  const radius = Math.max(2, frameWidth / 160);
  instances.forEach((instance, position) => {
    context.strokeStyle = context.fillStyle = skeletonColour(instance, position, palette);
    context.lineWidth = lineWidth;
    for (const [a, b] of edges) {
      const from = instance.points[a], to = instance.points[b];
      if (!from || !to) continue;
      context.beginPath();
      context.moveTo(from[0], from[1]);
      context.lineTo(to[0], to[1]);
      context.stroke();
    }
    for (const point of instance.points) {
      if (!point) continue;
      context.beginPath();
      context.arc(point[0], point[1], radius, 0, 2 * Math.PI);
      context.fill();
    }
  });
}
