import { expect, it } from "bun:test";
import { Copy, Message } from "../../src/server/queue/message.ts";
import { WaitingList } from "../../src/server/queue/waiting.ts";

let seq = 0;
function copy(created = 0): Copy {
  const n = seq++;
  return new Copy(new Message(`m.${n}`, "q/v1", "1", new Uint8Array(1), created, n), "1", null);
}
const ids = (list: Iterable<Copy>) => [...list].map((c) => c.message.id);

it("WaitingList keeps copies in arrival order, once each, and deletes any of them", () => {
  const list = new WaitingList();
  const [a, b, c] = [copy(), copy(), copy()];
  for (const each of [a, b, c, b]) list.add(each);
  expect(list.size).toBe(3);
  expect(ids(list.ordered())).toEqual([a, b, c].map((x) => x.message.id));
  expect(list.delete(b)).toBe(true);
  expect(list.delete(b)).toBe(false);
  expect(list.has(b)).toBe(false);
  expect(ids(list.ordered())).toEqual([a, c].map((x) => x.message.id));
  expect(list.delete(a) && list.delete(c)).toBe(true);
  expect(list.size).toBe(0);
  expect([...list.ordered()]).toEqual([]);
});

it("WaitingList sorts copies given back out of order before it is next read", () => {
  const list = new WaitingList();
  const [a, b, c] = [copy(), copy(), copy()];
  list.add(c);
  list.add(a);
  list.add(b);
  expect(ids(list.ordered())).toEqual([a, b, c].map((x) => x.message.id));
  list.delete(a);
  list.add(a); // given back: older than every copy present
  expect(ids(list.ordered())).toEqual([a, b, c].map((x) => x.message.id));
});

it("WaitingList read while copies are deleted and added: none deleted is given, one added again comes at its new place", () => {
  const list = new WaitingList();
  const copies = Array.from({ length: 300 }, () => copy());
  for (const each of copies) list.add(each);
  const seen: Copy[] = [];
  let n = 0;
  for (const each of list.ordered()) {
    seen.push(each);
    // Delete the next one, and move an early one to the end (deleted and added again).
    const next = copies[copies.indexOf(each) + 1];
    if (next) list.delete(next);
    if (n++ === 10) {
      list.delete(copies[0]!);
      list.add(copies[0]!);
    }
  }
  // As with a Set: the copy deleted and added again during the read is given again, last.
  expect(seen.filter((each) => each === copies[0]).length).toBe(2);
  expect(seen.at(-1)).toBe(copies[0]!);
  expect(new Set(seen).size).toBe(seen.length - 1);
  expect(seen.every((each) => list.has(each))).toBe(true);
  expect(seen.length - 1).toBe(list.size);
});

it("WaitingList compacts the slots deletes leave, also while it is being read", () => {
  const list = new WaitingList();
  const copies = Array.from({ length: 1000 }, () => copy());
  for (const each of copies) list.add(each);
  const reading = list.ordered()[Symbol.iterator]();
  expect(reading.next().value).toBe(copies[0]);
  for (const each of copies.slice(200, 1000)) list.delete(each); // nulls past the head
  const late = copy();
  list.add(late); // compacts: most slots were nulls
  const rest: Copy[] = [];
  for (let step = reading.next(); !step.done; step = reading.next()) rest.push(step.value);
  expect(rest).toEqual(copies.slice(1, 200)); // the array it started with, minus what was deleted
  expect(ids(list.ordered())).toEqual([...copies.slice(0, 200), late].map((x) => x.message.id));
  expect(list.size).toBe(201);
});

it("WaitingList expires and overflows the oldest copies first; recovered copies are outside the bound", () => {
  const list = new WaitingList();
  const recovered = copy(5);
  recovered.recovered = true;
  const old = [copy(10), copy(20)];
  const fresh = copy(100);
  for (const each of [recovered, ...old, fresh]) list.add(each);
  expect(list.bounded).toBe(3);
  expect(list.overflow(2)).toEqual([old[0]!]);
  expect(list.expire(50)).toEqual([recovered, old[1]!]);
  expect(ids(list.ordered())).toEqual([fresh.message.id]);
  expect(list.bounded).toBe(1);
});
