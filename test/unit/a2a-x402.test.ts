// The x402 A2A transport's pure part (gateway/a2a/x402.ts): the activation header, reading and
// removing a message's payment keys, and the answers in the JSON shape of each A2A spelling,
// read back with @a2a-js/sdk's own 1.0 types.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { StreamResponse } from '@a2a-js/sdk';
import {
  A2A_X402_EXTENSION,
  addReceipt,
  extensionActivated,
  isPaymentTaskId,
  messagePayment,
  newPaymentTaskId,
  paymentErrorCode,
  paymentFailedResult,
  paymentRejectedResult,
  paymentRequiredResult,
  spellingOf,
  stripPaymentKeys,
  withoutActivation,
} from '../../gateway/a2a/x402.ts';

type Json = Record<string, any>;
const ids = { taskId: 'x402-payment-task', contextId: 'ctx-1' };
const receipt = { success: true, transaction: '0xabc', network: 'eip155:8453', payer: '0x1' };

describe('the x402 A2A transport (pure part)', () => {
  it('is activated by the URI in a comma-separated list, in either header', () => {
    assert.equal(extensionActivated([undefined, A2A_X402_EXTENSION]), true);
    assert.equal(extensionActivated([`https://other.example/ext, ${A2A_X402_EXTENSION} `, '']), true);
    assert.equal(extensionActivated([`${A2A_X402_EXTENSION}/v2`, '']), false);
    assert.equal(extensionActivated(['', undefined]), false);
  });

  it('takes the activation out of the headers the agent gets, keeping other extensions', () => {
    const other = 'https://other.example/ext';
    assert.deepEqual(
      withoutActivation({
        'a2a-extensions': `${A2A_X402_EXTENSION}, ${other}`,
        'x-a2a-extensions': A2A_X402_EXTENSION,
        accept: '*/*',
      }),
      { 'a2a-extensions': other, accept: '*/*' },
    );
  });

  it('reads the payment, the payment task and the context of a message, and strips only the payment keys', () => {
    const taskId = newPaymentTaskId();
    assert.ok(isPaymentTaskId(taskId));
    assert.equal(isPaymentTaskId('task-123'), false);
    const request = {
      params: {
        message: {
          taskId,
          contextId: 'ctx',
          metadata: { skill: 'echo', 'x402.payment.status': 'payment-submitted', 'x402.payment.payload': { a: 1 } },
        },
      },
    };
    assert.deepEqual(messagePayment(request), {
      paid: true,
      payload: { a: 1 },
      status: 'payment-submitted',
      paymentTaskId: taskId,
      contextId: 'ctx',
    });
    assert.equal(stripPaymentKeys(request), true);
    assert.deepEqual(request.params.message.metadata, { skill: 'echo' });
    assert.equal(stripPaymentKeys(request), false);

    const only = { params: { message: { task_id: 'upstream-task', metadata: { 'x402.payment.payload': null } } } };
    assert.equal(messagePayment(only).paid, true, 'present, whatever its value');
    assert.equal(messagePayment(only).paymentTaskId, null, "an agent's own task id is not a payment task");
    stripPaymentKeys(only);
    assert.equal('metadata' in only.params.message, false, 'an emptied metadata goes');
    const loose = {
      params: {
        message: { metadata: { 'X402.Payment.Payload': {}, skill: 'echo' } },
        metadata: { 'x402.PAYMENT.status': 'payment-submitted' },
      },
    };
    assert.equal(stripPaymentKeys(loose), true, 'any casing, and in the request metadata too');
    assert.deepEqual(loose.params, { message: { metadata: { skill: 'echo' } } });
    assert.deepEqual(messagePayment({ params: 'junk' }), {
      paid: false,
      payload: undefined,
      status: null,
      paymentTaskId: null,
      contextId: null,
    });
  });

  it('asks for payment with an input-required task in the shape of each spelling', () => {
    assert.equal(spellingOf('message/send'), '0.3');
    assert.equal(spellingOf('SendStreamingMessage'), '1.0');
    const required = { x402Version: 2, accepts: [] };
    const current = paymentRequiredResult('1.0', ids, required);
    // The SDK's 1.0 reader takes it as a Task event.
    const read = StreamResponse.toJSON(StreamResponse.fromJSON(current)) as Json;
    assert.equal(read.task.id, ids.taskId);
    assert.equal(read.task.status.state, 'TASK_STATE_INPUT_REQUIRED');
    assert.equal(read.task.status.message.role, 'ROLE_AGENT');
    assert.deepEqual(read.task.status.message.metadata, {
      'x402.payment.status': 'payment-required',
      'x402.payment.required': required,
    });
    const legacy = paymentRequiredResult('0.3', ids, required) as Json;
    assert.equal(legacy.kind, 'task');
    assert.equal(legacy.status.state, 'input-required');
    assert.equal(legacy.status.message.kind, 'message');
    assert.equal(legacy.status.message.role, 'agent');
    assert.deepEqual(legacy.status.message.parts[0].kind, 'text');
  });

  it('answers a refused payment with a failed task, an error code and a failed receipt', () => {
    const failed = paymentFailedResult('0.3', ids, 'payment already used', 'eip155:8453') as Json;
    assert.equal(failed.status.state, 'failed');
    assert.deepEqual(failed.status.message.metadata, {
      'x402.payment.status': 'payment-failed',
      'x402.payment.error': 'PAYMENT_ALREADY_USED',
      'x402.payment.receipts': [
        { success: false, errorReason: 'payment already used', network: 'eip155:8453', transaction: '' },
      ],
    });
    assert.equal(paymentErrorCode('invalid payment'), 'INVALID_PAYMENT');
    assert.equal(paymentErrorCode('settlement_failed'), 'SETTLEMENT_FAILED');
    assert.equal(paymentErrorCode('anything else'), 'PAYMENT_FAILED');
    const current = paymentFailedResult('1.0', ids, 'invalid payment', 'eip155:8453') as Json;
    assert.equal(current.task.status.state, 'TASK_STATE_FAILED');
    const declined = paymentRejectedResult('1.0', ids) as Json;
    assert.equal(declined.task.status.state, 'TASK_STATE_FAILED');
    assert.deepEqual(declined.task.status.message.metadata, { 'x402.payment.status': 'payment-rejected' });
  });

  it("adds the receipt to a task's status message, a message, or a status message it creates", () => {
    const completed = {
      task: {
        id: 't',
        contextId: 'c',
        status: { state: 'TASK_STATE_COMPLETED', message: { parts: [{ text: 'hi' }] } },
      },
    };
    assert.equal(addReceipt(completed, '1.0', receipt), true);
    assert.deepEqual((completed.task.status.message as Json).metadata, {
      'x402.payment.status': 'payment-completed',
      'x402.payment.receipts': [receipt],
    });

    const message = { message: { messageId: 'm', metadata: { kept: 1 } } };
    assert.equal(addReceipt(message, '1.0', receipt), true);
    assert.equal((message.message.metadata as Json).kept, 1);
    assert.equal((message.message.metadata as Json)['x402.payment.status'], 'payment-completed');

    const submitted: Json = { kind: 'task', id: 't', contextId: 'c', status: { state: 'submitted' } };
    assert.equal(addReceipt(submitted, '0.3', receipt), true);
    assert.equal(submitted.status.message.kind, 'message');
    assert.equal(submitted.status.message.taskId, 't');
    assert.deepEqual(submitted.status.message.metadata['x402.payment.receipts'], [receipt]);

    const statusUpdate: Json = {
      statusUpdate: { taskId: 't', contextId: 'c', status: { state: 'TASK_STATE_WORKING' } },
    };
    assert.equal(addReceipt(statusUpdate, '1.0', receipt), true);
    assert.equal(statusUpdate.statusUpdate.status.message.role, 'ROLE_AGENT');

    assert.equal(addReceipt({ artifactUpdate: { taskId: 't' } }, '1.0', receipt), false);
    assert.equal(addReceipt({ kind: 'artifact-update' }, '0.3', receipt), false);
    assert.equal(addReceipt('junk', '1.0', receipt), false);
  });

  it('never throws on what a caller or an agent can send, and strips every payment key (property)', () => {
    const payloadKeys = fc.constantFrom('x402.payment.payload', 'x402.payment.status', 'x402.payment.other', 'skill');
    const metadata = fc.dictionary(fc.oneof(payloadKeys, fc.string()), fc.jsonValue());
    const request = fc.oneof(
      fc.jsonValue(),
      fc.record({ params: fc.record({ message: fc.record({ taskId: fc.jsonValue(), metadata }) }) }),
    );
    fc.assert(
      fc.property(request, (sent) => {
        const copy = structuredClone(sent);
        messagePayment(copy);
        stripPaymentKeys(copy);
        const left = (copy as { params?: { message?: { metadata?: Record<string, unknown> } } })?.params?.message
          ?.metadata;
        if (left && typeof left === 'object')
          assert.ok(Object.keys(left).every((key) => !key.startsWith('x402.payment.')));
      }),
    );
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom('1.0' as const, '0.3' as const), (result, spelling) => {
        addReceipt(structuredClone(result), spelling, receipt);
      }),
    );
  });
});
