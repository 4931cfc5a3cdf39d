/**
 * A rebalance plan: which queues to move so that the groups carry about the same weight. Pure:
 * it reads the map and the loads it is given and returns moves; POST /rebalance asks for them.
 *
 * A queue weighs what placement counts (cluster/queue_map.ts, #lightestGroup): 1, plus its rate
 * per 1,000 msg/s as its group's master last published it. Greedy: as long as the cap allows,
 * take the heaviest and the lightest group, and move from the first to the second the queue
 * that brings their two weights closest, provided the gap between them shrinks strictly (a queue
 * weighing less than the gap). Each such move lowers the sum of the squared weights, so the plan
 * ends; a queue moves at most once per plan, and never one with a move in progress.
 */

/** A queue counts 1 in its group's weight, plus its rate per this many msg/s (as placement counts it). */
export const RATE_PER_QUEUE = 1000;
/** Moves per plan unless asked otherwise. */
export const DEFAULT_MAX_MOVES = 10;

export interface RebalanceOptions {
  /** At most this many moves (default DEFAULT_MAX_MOVES). */
  max?: number;
  /** Queues with a move in progress: left where they are. */
  busy?: Iterable<string>;
}

export interface PlannedMove {
  queue: string;
  from: string;
  to: string;
  /** Why, in words: both groups' weights before and after. */
  reason: string;
}

export interface RebalancePlan {
  moves: PlannedMove[];
  /** Each group's weight before the moves and after them. */
  before: Record<string, number>;
  after: Record<string, number>;
}

/** A queue's weight: 1 plus its rate (msg/s) per RATE_PER_QUEUE. */
export function queueWeight(rate: number | undefined): number {
  return 1 + (Number.isFinite(rate) && rate! > 0 ? rate! : 0) / RATE_PER_QUEUE;
}

/**
 * `groups`: each group that can take part (a live master) with its queues; `loads`: each group's
 * queues' rates (msg/s). A group missing from `groups` is neither a source nor a target.
 */
export function planRebalance(
  groups: Record<string, readonly string[]>,
  loads: Record<string, Record<string, number>>,
  options: RebalanceOptions = {},
): RebalancePlan {
  const max = options.max ?? DEFAULT_MAX_MOVES;
  const fixed = new Set(options.busy ?? []);
  const names = Object.keys(groups).sort();
  const members = new Map<string, Map<string, number>>(); // group → queue → weight
  const weights = new Map<string, number>();
  for (const group of names) {
    const queues = new Map<string, number>();
    for (const queue of groups[group]!) queues.set(queue, queueWeight(loads[group]?.[queue]));
    members.set(group, queues);
    weights.set(group, sum(queues.values()));
  }
  const before = rounded(weights);
  const moves: PlannedMove[] = [];
  while (moves.length < max && names.length >= 2) {
    // Ties go to the first name: the same input always gives the same plan.
    const heaviest = names.reduce((a, b) => (weights.get(b)! > weights.get(a)! ? b : a));
    const lightest = names.reduce((a, b) => (weights.get(b)! < weights.get(a)! ? b : a));
    const gap = weights.get(heaviest)! - weights.get(lightest)!;
    const pick = bestQueue(members.get(heaviest)!, fixed, gap);
    if (pick === null) break;
    const [queue, weight] = pick;
    const from = [weights.get(heaviest)!, weights.get(heaviest)! - weight];
    const to = [weights.get(lightest)!, weights.get(lightest)! + weight];
    members.get(heaviest)!.delete(queue);
    members.get(lightest)!.set(queue, weight);
    weights.set(heaviest, from[1]!);
    weights.set(lightest, to[1]!);
    fixed.add(queue);
    moves.push({
      queue,
      from: heaviest,
      to: lightest,
      reason: `weight ${shown(weight)}: group "${heaviest}" ${shown(from[0]!)} → ${shown(from[1]!)}, ` +
        `group "${lightest}" ${shown(to[0]!)} → ${shown(to[1]!)}`,
    });
  }
  return { moves, before, after: rounded(weights) };
}

/**
 * The queue of `queues` whose move closes a gap of `gap` the most: the weight nearest half the
 * gap, strictly between 0 and the gap (otherwise the two groups end at least as far apart).
 */
function bestQueue(queues: Map<string, number>, fixed: Set<string>, gap: number): [string, number] | null {
  let best: [string, number] | null = null;
  let bestLeft = gap;
  for (const [queue, weight] of [...queues].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (fixed.has(queue)) continue;
    const left = Math.abs(gap - 2 * weight); // the gap once it moved
    if (left < bestLeft - 1e-9) [best, bestLeft] = [[queue, weight], left];
  }
  return best;
}

function sum(values: Iterable<number>): number {
  let total = 0;
  for (const value of values) total += value;
  return total;
}

function rounded(weights: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...weights].map(([group, weight]) => [group, Math.round(weight * 1000) / 1000]));
}

function shown(weight: number): string {
  return String(Math.round(weight * 100) / 100);
}
