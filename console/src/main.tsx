// The console's one entry: styles and the app, bundled by scripts/lib/console-build.ts.
import { render } from 'preact';
import 'uplot/dist/uPlot.min.css';
import './styles.css';
import { App } from './app.tsx';

render(<App />, document.getElementById('app')!);
