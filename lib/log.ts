// Structured JSON logs. Secrets and bodies are never passed to the logger; the redact list
// is a second line of defence for headers that might slip into a logged object.
import { pino, type Logger } from 'pino';

export function createLogger(name: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
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
  });
}

export type { Logger };
