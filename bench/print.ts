// What a benchmark prints as it goes: lines of its report on stdout, milliseconds at two decimals.
export const say = (line = '') => process.stdout.write(line + '\n');
export const fmtMs = (ms: number) => `${ms.toFixed(2)} ms`;
