/**
 * Mixture-of-experts ops by topic: the router and the routing counts, the expert loops (4.x's
 * ModuleList, 5.x's eager), 5.x's grouped_mm halves and the expert-parallel router hook.
 */
export { balancedCounts, capacityCounts, routerOp, type RouterAttrs } from './router.js';
export { expertMaskOp, expertOp, type ExpertAttrs, type ExpertMaskAttrs, type ExpertsImpl } from './experts.js';
export { gluOp, groupedDownOp, groupedGateUpOp, type GroupedExpertsAttrs } from './grouped.js';
export { expertParallelRouterOp, type ExpertParallelRouterAttrs } from './ep-router.js';
