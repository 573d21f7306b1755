/**
 * The ordered sets of the caching allocator's BlockPool (`std::set<Block*, Comparison>`): free
 * blocks by (size, address) (BlockComparatorSize, one stream) and unmapped blocks by address
 * (BlockComparatorAddress), as treaps: insert, remove, lower_bound, neighbours and the largest in
 * O(log n) expected. Priorities come from a fixed-seed generator, so a replay is deterministic.
 */

export interface TreeNode {
  size: number;
  addr: number;
  left: TreeNode | null;
  right: TreeNode | null;
  priority: number;
}

let seed = 0x9e3779b9;
function nextPriority(): number {
  // xorshift32: any fixed sequence will do; only the tree's shape depends on it, never a result.
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return seed >>> 0;
}

/** A set of nodes ordered by (size, addr) or by addr alone; addresses are unique. */
export class Treap<T extends TreeNode> {
  private root: T | null = null;
  size = 0;

  constructor(private readonly bySize: boolean) {}

  private less(a: TreeNode, b: TreeNode): boolean {
    if (this.bySize && a.size !== b.size) return a.size < b.size;
    return a.addr < b.addr;
  }

  insert(node: T): void {
    node.priority = nextPriority();
    // Split the tree at node: left < node <= right (no node equals it: addresses are unique).
    const leftHead = { right: null } as unknown as TreeNode;
    const rightHead = { left: null } as unknown as TreeNode;
    let l = leftHead;
    let r = rightHead;
    // Descend while the tree's nodes outrank the new one, then split the rest under it.
    let link: { node: TreeNode | null; parent: TreeNode | null; isLeft: boolean } = { node: this.root, parent: null, isLeft: false };
    while (link.node !== null && link.node.priority > node.priority) {
      const n = link.node;
      link = this.less(node, n) ? { node: n.left, parent: n, isLeft: true } : { node: n.right, parent: n, isLeft: false };
    }
    let t = link.node;
    while (t !== null) {
      if (this.less(t, node)) {
        l.right = t;
        l = t;
        t = t.right;
      } else {
        r.left = t;
        r = t;
        t = t.left;
      }
    }
    l.right = null;
    r.left = null;
    node.left = leftHead.right;
    node.right = rightHead.left;
    if (link.parent === null) this.root = node;
    else if (link.isLeft) link.parent.left = node;
    else link.parent.right = node;
    this.size += 1;
  }

  private static merge(a: TreeNode | null, b: TreeNode | null): TreeNode | null {
    if (a === null) return b;
    if (b === null) return a;
    if (a.priority > b.priority) {
      a.right = Treap.merge(a.right, b);
      return a;
    }
    b.left = Treap.merge(a, b.left);
    return b;
  }

  /** Removes a node that is in the set (found by its key, which must not have changed since insert). */
  remove(node: T): void {
    let parent: TreeNode | null = null;
    let t: TreeNode | null = this.root;
    while (t !== null && t !== node) {
      parent = t;
      t = this.less(node, t) ? t.left : t.right;
    }
    if (t === null) throw new Error('allocator replay: a block is missing from its pool (a bug)');
    const joined = Treap.merge(node.left, node.right);
    if (parent === null) this.root = joined as T | null;
    else if (parent.left === node) parent.left = joined;
    else parent.right = joined;
    node.left = null;
    node.right = null;
    this.size -= 1;
  }

  /** The first node with size >= `size` (by size set) or addr >= `size` (by address), smallest key first. */
  lowerBound(key: number): T | null {
    let best: TreeNode | null = null;
    let t = this.root as TreeNode | null;
    while (t !== null) {
      if ((this.bySize ? t.size : t.addr) >= key) {
        best = t;
        t = t.left;
      } else t = t.right;
    }
    return best as T | null;
  }

  /** The node after `node` in order, or null. */
  successor(node: TreeNode): T | null {
    let best: TreeNode | null = null;
    let t = this.root as TreeNode | null;
    while (t !== null) {
      if (this.less(node, t)) {
        best = t;
        t = t.left;
      } else t = t.right;
    }
    return best as T | null;
  }

  /** The node before `node` in order, or null. */
  predecessor(node: TreeNode): T | null {
    let best: TreeNode | null = null;
    let t = this.root as TreeNode | null;
    while (t !== null) {
      if (this.less(t, node)) {
        best = t;
        t = t.right;
      } else t = t.left;
    }
    return best as T | null;
  }

  /** The largest node, or null. */
  last(): T | null {
    let t = this.root as TreeNode | null;
    if (t === null) return null;
    while (t.right !== null) t = t.right;
    return t as T;
  }

  /** Every node in order (a copy: the caller may change the set while walking it). */
  toArray(): T[] {
    const out: T[] = [];
    const stack: TreeNode[] = [];
    let t = this.root as TreeNode | null;
    while (t !== null || stack.length > 0) {
      while (t !== null) {
        stack.push(t);
        t = t.left;
      }
      const n = stack.pop()!;
      out.push(n as T);
      t = n.right;
    }
    return out;
  }
}
