// Who settles a request the handler accepted: the owner of the settlement (the service's,
// facilitator-service/owner.ts), which runs the steps on the fast path or starts and awaits
// SettlementWorkflow. The domain's view of it, so a scheme's handler (facilitator/schemes/) can
// hand a request over without knowing Temporal.
import type { SettlementRequest } from './request.ts';
import type { Reads } from './steps.ts';
import type { SettlementOutcome } from './types.ts';

export type SettlementRunner = {
  /** The fast path's reads for a request about to be settled (nothing written); undefined without a worker here. */
  read(key: string, accountId: string, request: SettlementRequest): Reads | undefined;
  settle(
    key: string,
    accountId: string,
    request: SettlementRequest,
    deadline: number,
    reads?: Reads,
  ): Promise<SettlementOutcome | 'in_flight'>;
};
