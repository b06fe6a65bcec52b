// The facts of an A2A request (gateway/a2a/methods.ts) as the pure function it is: every task a
// request names is found, under the JSON name of its field and under the protobuf's own name
// (`task_id`), which protobuf JSON readers such as the @a2a-js/sdk server take as readily.
import assert from 'node:assert/strict';
import { A2aRequestError, a2aRequestFacts } from '../../gateway/a2a/methods.ts';

describe('A2A request facts', () => {
  it("names a message's task and referenced tasks in either spelling", () => {
    const facts = a2aRequestFacts('SendMessage', {
      message: { taskId: 't1', task_id: 't2', referenceTaskIds: ['t3'], reference_task_ids: ['t4'], context_id: 'c1' },
    });
    assert.deepEqual(facts.taskIds, ['t1', 't2', 't3', 't4']);
    assert.equal(facts.contextId, 'c1');
  });

  it('names the task of a push-notification config method in either spelling', () => {
    assert.deepEqual(a2aRequestFacts('GetTaskPushNotificationConfig', { task_id: 't1' }).taskIds, ['t1']);
    assert.deepEqual(a2aRequestFacts('CreateTaskPushNotificationConfig', { taskId: 'a', task_id: 'b' }).taskIds, [
      'a',
      'b',
    ]);
    assert.deepEqual(a2aRequestFacts('GetTask', { id: 't1' }).taskIds, ['t1']);
  });

  it('refuses an id that is not a bounded string under either spelling', () => {
    assert.throws(() => a2aRequestFacts('SendMessage', { message: { task_id: 7 } }), A2aRequestError);
    assert.throws(
      () => a2aRequestFacts('SendMessage', { message: { reference_task_ids: new Array(101).fill('t') } }),
      A2aRequestError,
    );
    assert.throws(() => a2aRequestFacts('CancelTask', {}), A2aRequestError);
  });

  it('reads a skill only from a method that sends a message', () => {
    const named = { message: { metadata: { skill: 'free' } } };
    assert.equal(a2aRequestFacts('SendMessage', named).skill, 'free');
    assert.equal(a2aRequestFacts('message/stream', named).skill, 'free');
    assert.equal(a2aRequestFacts('GetTask', { id: 't1', ...named }).skill, null);
    assert.equal(a2aRequestFacts('SubscribeToTask', { id: 't1', ...named }).skill, null);
    assert.equal(a2aRequestFacts('tasks/cancel', { id: 't1', ...named }).skill, null);
  });
});
