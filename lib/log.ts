// Structured JSON logs. Secrets and bodies are never passed to the logger; the redact list
// is a second line of defence for headers that might slip into a logged object.
// LOG_FORMAT=pretty writes the same records as readable lines (pino-pretty, in this thread, so
// nothing is lost at exit); `npm start` sets it when its output is a terminal.
import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';

export function createLogger(name: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  const destination =
    process.env.LOG_FORMAT === 'pretty' ? pretty({ sync: true, colorize: true, ignore: 'pid,hostname' }) : undefined;
  return pino(
    {
      name,
      level,
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers["x-payment"]',
          'req.headers["payment-signature"]',
          'headers.authorization',
          'headers["x-payment"]',
          'headers["payment-signature"]',
          '*.plaintext',
          '*.privateKey',
          '*.signature',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

export type { Logger };
