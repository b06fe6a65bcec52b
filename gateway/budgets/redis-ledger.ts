// The budget ledger in Redis (ledger.ts says what it keeps), shared by every replica: each step
// that decides is one Lua script, so no two replicas can both take a window's last call. Amounts
// are added with HINCRBY (exact 64-bit integers); the comparison with a limit is done on Lua
// numbers, exact up to 2^53 base units, which is why a limit stays below 10^15 (the API's rule).
// Keys: `w:<budget>:<window start ms>` {a, c} and its `:alerted` set, `r:<invocation>` the
// reservation {k (its window keys), a, c, o (owner), t (when)}, `due` (reservations by the
// time they are next looked at), `alerts` (crossed thresholds to deliver), `o:<owner>` liveness.
// The scripts name keys they derive (a reservation's windows), so the ledger wants one Redis,
// not a cluster, as the rate limiter does.
import { Redis } from 'ioredis';
import { TAKE_FUNCTION, type RedisRateLimiter } from '../ratelimit/redis.ts';
import type { RateLimiter } from '../ratelimit/limiter.ts';
import {
  parseAlert,
  type BudgetLedger,
  type Claim,
  type DueReservation,
  type QueuedAlert,
  type Reservation,
  type ReserveResult,
  type Usage,
} from './ledger.ts';

// KEYS: reservation, due, alerts, then one window key per claim.
// ARGV: invocation, amount, calls, owner, now, due at, reservation TTL ms, claim count, then per
// claim: limit amount ('' none), limit calls ('' none), hard (1|0), keep ms (0: forever),
// alert name, thresholds (comma separated, '' none).
// Returns {1} admitted, {-1} reserved already, or {0, i…} the refusing claims (1-based).
const RESERVE_FUNCTION = `
local function reserve_call(KEYS, ARGV)
local amount = tonumber(ARGV[2])
local calls = tonumber(ARGV[3])
local n = tonumber(ARGV[8])
local function share(la, lc, a, c)
  local s = 0
  if la and la > 0 then s = math.max(s, a / la) end
  if lc and lc > 0 then s = math.max(s, c / lc) end
  return s
end
local before = {}
local refusing = {0}
for i = 1, n do
  local o = 8 + (i - 1) * 6
  local la = tonumber(ARGV[o + 1])
  local lc = tonumber(ARGV[o + 2])
  local st = redis.call('HMGET', KEYS[3 + i], 'a', 'c')
  local a = tonumber(st[1]) or 0
  local c = tonumber(st[2]) or 0
  before[i] = {a, c}
  local over = (la and a + amount > la) or (lc and c + calls > lc)
  if ARGV[o + 3] == '1' and over then refusing[#refusing + 1] = i end
end
if #refusing > 1 then return refusing end
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
local names = {}
for i = 1, n do
  local o = 8 + (i - 1) * 6
  local key = KEYS[3 + i]
  local a = redis.call('HINCRBY', key, 'a', ARGV[2])
  local c = redis.call('HINCRBY', key, 'c', ARGV[3])
  local keep = tonumber(ARGV[o + 4])
  if keep > 0 then redis.call('PEXPIRE', key, keep) end
  names[#names + 1] = key
  if ARGV[o + 6] ~= '' then
    local la = tonumber(ARGV[o + 1])
    local lc = tonumber(ARGV[o + 2])
    local from = share(la, lc, before[i][1], before[i][2])
    local to = share(la, lc, a, c)
    for t in string.gmatch(ARGV[o + 6], '[^,]+') do
      local tv = tonumber(t)
      if from < tv and to >= tv then
        local set = key .. ':alerted'
        if redis.call('SADD', set, t) == 1 then
          if keep > 0 then redis.call('PEXPIRE', set, keep) end
          redis.call('RPUSH', KEYS[3], ARGV[o + 5] .. '|' .. t)
        end
      end
    end
  end
end
redis.call('HSET', KEYS[1], 'k', table.concat(names, ' '), 'a', ARGV[2], 'c', ARGV[3], 'o', ARGV[4], 't', ARGV[5])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
redis.call('ZADD', KEYS[2], tonumber(ARGV[6]), ARGV[1])
return {1}
end
`;

const RESERVE = `${RESERVE_FUNCTION}
return reserve_call(KEYS, ARGV)
`;

// A call's rate-limit take (the limiter's own function, gateway/ratelimit/redis.ts) and, only
// when it is allowed, its reservation, in one script: the admission's one round trip to Redis.
// KEYS: the buckets, then RESERVE's. ARGV: the bucket count, the buckets' rate and burst pairs,
// then RESERVE's. Returns the take's {allowed, wait, slowest}, then RESERVE's answer when allowed.
const TAKE_AND_RESERVE = `${TAKE_FUNCTION}${RESERVE_FUNCTION}
local n = tonumber(ARGV[1])
local bucket_keys, bucket_args, keys, args = {}, {}, {}, {}
for i = 1, #KEYS do
  if i <= n then bucket_keys[i] = KEYS[i] else keys[i - n] = KEYS[i] end
end
for i = 2, #ARGV do
  if i <= 1 + 2 * n then bucket_args[i - 1] = ARGV[i] else args[i - 1 - 2 * n] = ARGV[i] end
end
local taken = take_tokens(bucket_keys, bucket_args)
if taken[1] ~= 1 then return taken end
local reserved = reserve_call(keys, args)
for _, v in ipairs(reserved) do taken[#taken + 1] = v end
return taken
`;

// KEYS: due. ARGV: the reservations' key prefix, then per reservation: invocation, counted
// amount, counted calls. Each is taken back out of every window still kept and what the call
// counts added (two HINCRBYs each, so no amount passes through a Lua number), then dropped.
// Answers how many were still there (one settled already is left alone).
const SETTLE = `
local settled = 0
for i = 2, #ARGV, 3 do
  local id, amount, calls = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local rkey = ARGV[1] .. id
  local r = redis.call('HMGET', rkey, 'k', 'a', 'c')
  if r[1] then
    for key in string.gmatch(r[1], '[^ ]+') do
      if redis.call('EXISTS', key) == 1 then
        if r[2] ~= amount then
          if r[2] ~= '0' then redis.call('HINCRBY', key, 'a', '-' .. r[2]) end
          if amount ~= '0' then redis.call('HINCRBY', key, 'a', amount) end
        end
        if r[3] ~= calls then
          redis.call('HINCRBY', key, 'c', tonumber(calls) - tonumber(r[3]))
        end
      end
    end
    redis.call('DEL', rkey)
    settled = settled + 1
  end
  redis.call('ZREM', KEYS[1], id)
end
return settled
`;

// KEYS: due. ARGV: now, lease until, limit, the reservations' key prefix. The due
// reservations, each leased (pushed to `lease until`), as {id, owner, reserved at, …}; one whose
// record is gone (settled meanwhile, or expired) leaves `due`.
const DUE = `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  local r = redis.call('HMGET', ARGV[4] .. id, 'o', 't')
  if r[1] then
    redis.call('ZADD', KEYS[1], ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
`;

const DEFAULT_PREFIX = 'gw:bud:';
/** A reservation outlives any call by far; the key only expires if everything else failed. */
const RESERVATION_TTL_MS = 7 * 24 * 3_600_000;

type WithScripts = Redis & {
  gwBudgetReserve(numKeys: number, ...args: Array<string | number>): Promise<number[]>;
  gwTakeAndReserve(numKeys: number, ...args: Array<string | number>): Promise<number[]>;
  gwBudgetSettle(numKeys: number, ...args: Array<string | number>): Promise<number>;
  gwBudgetDue(numKeys: number, ...args: Array<string | number>): Promise<string[]>;
};

const thresholdText = (t: number) => String(t);

export function createRedisLedger(
  url: string,
  opts: { prefix?: string; onError?: (err: Error) => void } = {},
): BudgetLedger {
  const prefix = opts.prefix ?? DEFAULT_PREFIX;
  const redis = new Redis(url, {
    maxRetriesPerRequest: 1,
    commandTimeout: 1_000,
    connectTimeout: 2_000,
  }) as WithScripts;
  redis.on('error', (err: Error) => opts.onError?.(err));
  redis.defineCommand('gwBudgetReserve', { lua: RESERVE });
  redis.defineCommand('gwTakeAndReserve', { lua: TAKE_AND_RESERVE });
  redis.defineCommand('gwBudgetSettle', { lua: SETTLE });
  redis.defineCommand('gwBudgetDue', { lua: DUE });
  const windowKey = (c: Pick<Claim, 'budgetId' | 'windowStartMs'>) => `${prefix}w:${c.budgetId}:${c.windowStartMs}`;
  const reservationPrefix = `${prefix}r:`;
  const reservationKey = (id: string) => reservationPrefix + id;
  const settleArgs = (id: string, counted: Usage) => [id, counted.amount.toString(), String(counted.calls)];
  const dueKey = `${prefix}due`;
  const alertsKey = `${prefix}alerts`;
  const ownerKey = (owner: string) => `${prefix}o:${owner}`;

  /** RESERVE's keys and arguments. */
  const reserveArgs = (claims: Claim[], reservation: Reservation, owner: string, dueAtMs: number) => {
    const keys = [reservationKey(reservation.invocationId), dueKey, alertsKey, ...claims.map(windowKey)];
    const args: Array<string | number> = [
      reservation.invocationId,
      reservation.amount.toString(),
      reservation.calls,
      owner,
      Date.now(),
      dueAtMs,
      RESERVATION_TTL_MS,
      claims.length,
    ];
    for (const c of claims)
      args.push(
        c.limitAmount === null ? '' : c.limitAmount.toString(),
        c.limitCalls === null ? '' : c.limitCalls,
        c.hard ? '1' : '0',
        c.keepMs ?? 0,
        `${c.budgetId}|${c.windowStartMs}`,
        c.thresholds.map(thresholdText).join(','),
      );
    return { keys, args };
  };
  const resultOf = ([state, ...refusing]: number[]): ReserveResult =>
    state === 0 ? { admitted: false, refusing: refusing.map((i) => i - 1) } : { admitted: true };
  const isRedisLimiter = (limiter: RateLimiter): limiter is RedisRateLimiter => 'takeArgs' in limiter;

  return {
    async reserve(claims, reservation, owner, dueAtMs) {
      const { keys, args } = reserveArgs(claims, reservation, owner, dueAtMs);
      return resultOf(await redis.gwBudgetReserve(keys.length, ...keys, ...args));
    },
    async takeAndReserve(take, claims, reservation, owner, dueAtMs) {
      // A limiter of its own kind (memory, in a test) is asked on its own first.
      if (!isRedisLimiter(take.limiter)) {
        const decision = await take.limiter.take(take.buckets);
        return {
          decision,
          reserved: decision.allowed ? await this.reserve(claims, reservation, owner, dueAtMs) : null,
        };
      }
      const bucketArgs = take.limiter.takeArgs(take.buckets);
      const { keys, args } = reserveArgs(claims, reservation, owner, dueAtMs);
      const answer = await redis.gwTakeAndReserve(
        bucketArgs.keys.length + keys.length,
        ...bucketArgs.keys,
        ...keys,
        take.buckets.length,
        ...bucketArgs.args,
        ...args,
      );
      const decision = take.limiter.decisionOf(take.buckets, answer.slice(0, 3) as [number, number, number]);
      return { decision, reserved: decision.allowed ? resultOf(answer.slice(3)) : null };
    },
    async settle(invocationId, counted) {
      return (await redis.gwBudgetSettle(1, dueKey, reservationPrefix, ...settleArgs(invocationId, counted))) === 1;
    },
    async settleAll(entries) {
      if (entries.length === 0) return;
      const args = entries.flatMap((e) => settleArgs(e.invocationId, e.counted));
      await redis.gwBudgetSettle(1, dueKey, reservationPrefix, ...args);
    },
    async usage(windows) {
      if (windows.length === 0) return [];
      const pipeline = redis.pipeline();
      for (const w of windows) pipeline.hmget(windowKey(w), 'a', 'c');
      const answers = (await pipeline.exec()) ?? [];
      return answers.map(([err, value]) => {
        if (err) throw err;
        const [a, c] = value as Array<string | null>;
        return { amount: BigInt(a ?? '0'), calls: Number(c ?? '0') };
      });
    },
    async due(nowMs, leaseUntilMs, limit) {
      const flat = await redis.gwBudgetDue(1, dueKey, nowMs, leaseUntilMs, limit, reservationPrefix);
      const due: DueReservation[] = [];
      for (let i = 0; i < flat.length; i += 3)
        due.push({ invocationId: flat[i], owner: flat[i + 1], reservedAtMs: Number(flat[i + 2]) });
      return due;
    },
    async deferAll(invocationIds, atMs) {
      if (invocationIds.length === 0) return;
      await redis.zadd(dueKey, 'XX', ...invocationIds.flatMap((id) => [atMs, id]));
    },
    async heartbeat(owner, ttlMs) {
      await redis.set(ownerKey(owner), '1', 'PX', ttlMs);
    },
    async alive(owners) {
      if (owners.length === 0) return new Set();
      const values = await redis.mget(...owners.map(ownerKey));
      return new Set(owners.filter((_, i) => values[i] !== null));
    },
    async alerts(limit) {
      const raw = await redis.lrange(alertsKey, 0, limit - 1);
      const parsed: QueuedAlert[] = [];
      for (const item of raw) {
        const alert = parseAlert(item);
        // Nothing this code queued: dropped so it cannot block the queue.
        if (alert) parsed.push(alert);
        else await redis.lrem(alertsKey, 1, item);
      }
      return parsed;
    },
    async delivered(alert) {
      await redis.lrem(alertsKey, 1, alert.raw);
    },
    async close() {
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
