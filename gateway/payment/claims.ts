// The streaming route's import path, kept until that route imports ./binding.ts itself.
export { insertBindingPayment } from './binding.ts';
