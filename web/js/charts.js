// Chart.js wrappers for the run page. Chart.js is loaded as a classic script
// (window.Chart, from web/node_modules); the colours come from the CSS custom properties
// so the charts follow the page's light or dark theme.

const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
const reducedMotion = () => window.matchMedia('(prefers-reduced-motion: reduce)').matches;

export function chartAvailable() {
  return typeof window.Chart === 'function';
}

function baseOptions({ yTitle, yMin, yMax, stacked = false, onPick }) {
  const grid = css('--chart-grid');
  const text = css('--text-muted');
  return {
    responsive: true,
    maintainAspectRatio: false,
    animation: reducedMotion() ? false : { duration: 250 },
    interaction: { mode: 'index', intersect: false },
    plugins: {
      legend: {
        position: 'bottom',
        labels: {
          color: text, boxWidth: 14, usePointStyle: true,
          // Series the run never reports (no server test set, say) stay out of the legend.
          filter: (item, data) => !data.datasets[item.datasetIndex].absent,
        },
      },
      tooltip: { callbacks: {} },
    },
    scales: {
      x: {
        stacked,
        title: { display: true, text: 'round', color: text },
        ticks: { color: text, precision: 0, autoSkip: true, maxRotation: 0 },
        grid: { color: grid },
      },
      y: {
        stacked,
        min: yMin,
        max: yMax,
        beginAtZero: stacked,
        title: { display: Boolean(yTitle), text: yTitle, color: text },
        ticks: { color: text, precision: stacked ? 0 : undefined },
        grid: { color: grid },
      },
    },
    onClick: onPick ? (event, elements, chart) => {
      const hit = chart.getElementsAtEventForMode(event, 'index', { intersect: false }, false);
      if (hit.length) onPick(chart.data.labels[hit[0].index]);
    } : undefined,
  };
}

// A line chart over rounds. `series`: [{key, label, color: '--css-var', dash}].
// update(rows) takes one row per round ({round, [key]: number|null}).
export class RoundLineChart {
  constructor(canvas, { series, yTitle, yMin, yMax, onPick, describe }) {
    this.canvas = canvas;
    this.series = series;
    this.describe = describe;
    this.chart = new window.Chart(canvas, {
      type: 'line',
      data: {
        labels: [],
        datasets: series.map((s) => ({
          label: s.label,
          data: [],
          borderColor: css(s.color),
          backgroundColor: css(s.color),
          borderDash: s.dash ? [6, 4] : undefined,
          borderWidth: 2,
          pointRadius: 3,
          pointHoverRadius: 5,
          spanGaps: true,
          tension: 0.15,
        })),
      },
      options: baseOptions({ yTitle, yMin, yMax, onPick }),
    });
  }

  update(rows) {
    // Reloads happen on every event; redraw (and animate) only when the numbers changed.
    const key = JSON.stringify(rows.map((r) => [r.round, ...this.series.map((s) => r[s.key] ?? null)]));
    if (key === this.key) return;
    this.key = key;
    this.chart.data.labels = rows.map((r) => r.round);
    this.series.forEach((s, i) => {
      this.chart.data.datasets[i].data = rows.map((r) => (Number.isFinite(r[s.key]) ? r[s.key] : null));
      this.chart.data.datasets[i].absent = rows.length > 0 && rows.every((r) => !Number.isFinite(r[s.key]));
    });
    this.chart.update();
    const points = rows.filter((r) => this.series.some((s) => Number.isFinite(r[s.key]))).length;
    this.canvas.closest('figure').dataset.points = String(points);
    if (this.describe) this.canvas.setAttribute('aria-label', this.describe(rows));
  }

  destroy() { this.chart.destroy(); }
}

// Stacked bars of participation per round attempt: accepted, rejected, timed out, dropped,
// late (over-selected clients still training when the round closed).
export class ParticipationChart {
  constructor(canvas, { onPick }) {
    this.canvas = canvas;
    this.parts = [
      { key: 'accepted', label: 'accepted', color: '--ok' },
      { key: 'rejected', label: 'rejected', color: '--bad' },
      { key: 'timed_out', label: 'timed out', color: '--warn' },
      { key: 'dropped', label: 'dropped', color: '--neutral' },
      { key: 'late', label: 'late', color: '--info' },
    ];
    this.chart = new window.Chart(canvas, {
      type: 'bar',
      data: {
        labels: [],
        datasets: this.parts.map((p) => ({
          label: p.label, data: [], backgroundColor: css(p.color), borderWidth: 0, maxBarThickness: 36,
        })),
      },
      options: baseOptions({ yTitle: 'clients', stacked: true, onPick }),
    });
  }

  // attempts: Round rows (every attempt); one bar per attempt, labelled by round.
  update(attempts) {
    const key = JSON.stringify(attempts.map((a) => [a.round, a.attempt, ...this.parts.map((p) => a[p.key] ?? 0)]));
    if (key === this.key) return;
    this.key = key;
    this.chart.data.labels = attempts.map((a) => a.round);
    this.parts.forEach((p, i) => {
      this.chart.data.datasets[i].data = attempts.map((a) => a[p.key] ?? 0);
    });
    this.chart.update();
    this.canvas.closest('figure').dataset.points = String(attempts.length);
    const accepted = attempts.reduce((n, a) => n + (a.accepted || 0), 0);
    const selected = attempts.reduce((n, a) => n + (a.selected || 0), 0);
    this.canvas.setAttribute('aria-label',
      `Participation over ${attempts.length} round attempt(s): ${accepted} of ${selected} selected updates accepted.`);
  }

  destroy() { this.chart.destroy(); }
}
