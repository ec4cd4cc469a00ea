//! Workgroup renumbering for the MI355X's XCDs, shared by the kernels that order their work by
//! XCD.

use tilegen_dsl::Int;
use tilegen_dsl::target::XCDS;

/// The position of dispatched workgroup `i` of `n` when the workgroups of each XCD are numbered
/// consecutively. Workgroup `i` runs on XCD `i mod 8`, so giving it work item `xcd_order(i)`
/// puts consecutive work items on one XCD, where they run side by side and share its L2. A
/// bijection of `0..n` for any `n`.
pub(crate) fn xcd_order<'k, 'ctx>(i: Int<'k, 'ctx>, n: Int<'k, 'ctx>) -> Int<'k, 'ctx> {
    let xcds = i64::from(XCDS);
    let x = i % xcds;
    // XCD x holds n / 8 workgroups, one more if x < n mod 8; those of the XCDs before it come
    // first.
    x * (n / xcds) + x.min(&(n % xcds)) + i / xcds
}
