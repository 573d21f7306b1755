export { bounds, type Bounds } from './bounds.js';
export { compile, evaluate, substitute, type Env } from './evaluate.js';
export { isExpr, type Atom, type Dim, type Expr, type Factor, type FloorDivAtom, type MaxAtom, type SymAssumptions, type SymAtom, type Term } from './expr.js';
export { formatDim } from './format.js';
export { add, ceilDiv, floorDiv, max, mul, neg, product, sub, sum, sym } from './ops.js';
