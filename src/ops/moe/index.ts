/**
 * Mixture-of-experts ops by topic: the router and the routing counts, the expert loops (4.x's
 * ModuleList, 5.x's eager), 5.x's grouped_mm halves and the expert-parallel router hook.
 */
export { balancedCounts, capacityCounts, routerRule, type RouterAttrs } from './router.js';
export { expertMaskRule, expertRule, type ExpertAttrs, type ExpertMaskAttrs, type ExpertsImpl } from './experts.js';
export { gluRule, groupedDownRule, groupedGateUpRule, type GroupedExpertsAttrs } from './grouped.js';
export { expertParallelRouterRule, type ExpertParallelRouterAttrs } from './ep-router.js';
