// A payer's next call on a channel this process is still committing a charge on wakes when that
// commit settles, not at the end of its backoff step (gateway/payment/channels/local-releases.ts).
import assert from 'node:assert/strict';
import { channelCommitOrTimeout, noteChannelCommit } from '../../gateway/payment/channels/local-releases.ts';

describe('channels: waiting for a commit this process is making', () => {
  it('wakes as soon as the channel’s commit settles, well before the step’s end', async () => {
    let finish!: () => void;
    noteChannelCommit('0xaa', new Promise<void>((resolve) => (finish = resolve)));
    const started = performance.now();
    const waited = channelCommitOrTimeout('0xaa', 5_000);
    setTimeout(finish, 20);
    await waited;
    assert.ok(performance.now() - started < 2_000, 'woken by the commit, not by the 5 s step');
  });
  it('wakes too when the commit fails (the lease is then asked again)', async () => {
    noteChannelCommit('0xbb', Promise.reject(new Error('lost')));
    const started = performance.now();
    await channelCommitOrTimeout('0xbb', 5_000);
    assert.ok(performance.now() - started < 2_000);
  });
  it('waits the step out when no commit of this channel is in flight here', async () => {
    noteChannelCommit('0xcc', Promise.resolve());
    await new Promise((resolve) => setImmediate(resolve));
    const started = performance.now();
    await channelCommitOrTimeout('0xcc', 30);
    assert.ok(performance.now() - started >= 25, 'a settled commit is forgotten');
    const other = performance.now();
    await channelCommitOrTimeout('0xdd', 30);
    assert.ok(performance.now() - other >= 25);
  });
});
