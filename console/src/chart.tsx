// A time chart (uPlot, drawn on a canvas) and, beside it, the same numbers as a table that
// screen readers and keyboard users can read (visually hidden; "Show numbers" reveals it).
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';

type Line = { label: string; values: (number | null)[]; color: string; bars?: boolean };

type Props = {
  title: string;
  x: number[];
  lines: Line[];
  /** How a value reads in the table and the axis (count, ms, USDC). */
  format: (v: number) => string;
  bucket: 'hour' | 'day';
};

const HEIGHT = 200;

export function Chart({ title, x, lines, format, bucket }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const [showTable, setShowTable] = useState(false);
  const shape = lines.map((l) => `${l.label}:${l.bars ? 'b' : 'l'}`).join(',');

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const opts: uPlot.Options = {
      width: Math.max(el.clientWidth, 240),
      height: HEIGHT,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [
        { stroke: 'currentColor', grid: { stroke: 'rgba(128,128,128,0.2)' } },
        {
          stroke: 'currentColor',
          grid: { stroke: 'rgba(128,128,128,0.2)' },
          values: (_u, ticks) => ticks.map(format),
          // Wide enough for the longest label drawn (about 7 px a character at the axis font).
          size: (_u, values) => Math.max(50, 16 + 7 * Math.max(0, ...(values ?? []).map((v) => String(v).length))),
        },
      ],
      series: [
        { label: bucket === 'hour' ? 'Hour' : 'Day' },
        ...lines.map((l, i) => ({
          label: l.label,
          stroke: l.color,
          width: 2,
          fill: l.bars ? l.color : undefined,
          // Bars of a chart's later lines narrower, so that errors show inside their calls.
          paths: l.bars ? uPlot.paths.bars!({ size: i === 0 ? [0.7, 40] : [0.35, 20] }) : undefined,
          // Lines: points too, so a lone bucket (one busy hour) is still seen.
          points: { show: !l.bars, size: 5 },
          value: (_u: uPlot, v: number | null) => (v === null ? '—' : format(v)),
        })),
      ],
    };
    plot.current = new uPlot(opts, [x, ...lines.map((l) => l.values)] as uPlot.AlignedData, el);
    const resize = new ResizeObserver(() =>
      plot.current?.setSize({ width: Math.max(el.clientWidth, 240), height: HEIGHT }),
    );
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // A new chart only when its lines change; new numbers go through setData below.
  }, [shape, bucket]);

  useEffect(() => {
    plot.current?.setData([x, ...lines.map((l) => l.values)] as uPlot.AlignedData);
  }, [x, lines]);

  const label = (t: number) =>
    new Date(t * 1000).toLocaleString(
      undefined,
      bucket === 'hour' ? { dateStyle: 'short', timeStyle: 'short' } : { dateStyle: 'medium' },
    );
  return (
    <figure class="chart" data-chart={title}>
      <figcaption>
        <span>{title}</span>
        <button type="button" class="link" aria-expanded={showTable} onClick={() => setShowTable(!showTable)}>
          {showTable ? 'Hide numbers' : 'Show numbers'}
        </button>
      </figcaption>
      <div ref={box} class="plot" aria-hidden="true" />
      <div class={showTable ? 'table-wrap' : 'visually-hidden'}>
        <table class="chart-data">
          <caption class="visually-hidden">
            {title}, per {bucket}
          </caption>
          <thead>
            <tr>
              <th scope="col">{bucket === 'hour' ? 'Hour' : 'Day'}</th>
              {lines.map((l) => (
                <th scope="col">{l.label}</th>
              ))}
            </tr>
          </thead>
          <tbody>
            {x.map((t, i) => (
              <tr data-bucket={new Date(t * 1000).toISOString()}>
                <th scope="row">{label(t)}</th>
                {lines.map((l) => (
                  <td data-value={l.values[i] ?? ''}>{l.values[i] === null ? '—' : format(l.values[i]!)}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </figure>
  );
}
