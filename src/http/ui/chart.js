// A line chart on a canvas: one series of points over time, gaps where a point has no value,
// its axis from 0 to the largest value, the latest value written beside the title.

function colour(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

/**
 * Draws `values` (numbers or null, oldest first) on `canvas`, spanning `seconds`; `format`
 * writes a value for the axis.
 */
export function draw(canvas, values, seconds, format) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || canvas.width;
  const height = canvas.clientHeight || canvas.height;
  if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
  if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  const known = values.filter((v) => v !== null && v !== undefined);
  const top = Math.max(...known, 0) || 1;
  const left = 44;
  const bottom = height - 16;
  const x = (i) => left + ((width - left - 6) * i) / Math.max(values.length - 1, 1);
  const y = (v) => bottom - ((bottom - 8) * v) / top;
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = colour("--muted");
  g.strokeStyle = colour("--line");
  g.lineWidth = 1;
  g.beginPath();
  g.moveTo(left, 8);
  g.lineTo(left, bottom);
  g.lineTo(width - 6, bottom);
  g.stroke();
  g.textAlign = "right";
  g.fillText(format(top), left - 4, 14);
  g.fillText(format(0), left - 4, bottom);
  g.textAlign = "left";
  g.fillText(`${Math.round(seconds / 60)} min ago`, left, height - 3);
  g.textAlign = "right";
  g.fillText("now", width - 6, height - 3);
  g.strokeStyle = colour("--accent");
  g.fillStyle = colour("--accent");
  g.lineWidth = 2;
  let drawing = false;
  g.beginPath();
  values.forEach((v, i) => {
    if (v === null || v === undefined) {
      drawing = false;
      return;
    }
    if (drawing) g.lineTo(x(i), y(v));
    else g.moveTo(x(i), y(v));
    drawing = true;
    g.fillRect(x(i) - 2.5, y(v) - 2.5, 5, 5);
  });
  g.stroke();
  const last = [...known].pop();
  canvas.dataset.latest = last === undefined ? "" : String(last);
  canvas.setAttribute("aria-label", `${canvas.getAttribute("aria-label").split(":")[0]}: ${last === undefined ? "no calls yet" : format(last)}`);
}
