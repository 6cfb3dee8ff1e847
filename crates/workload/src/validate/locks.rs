//! Lock discipline of a workload's op lists: balanced per op list, never
//! taken twice, never held across a barrier or a queue op.

use super::Cx;
use crate::spec::*;
use serde_spanned::Spanned;
use std::ops::Range;

impl Cx<'_> {
    /// Locks must be taken and released in the same op list (a loop body is its
    /// own scope), never taken twice by one thread, never released unheld.
    pub(super) fn check_locks(&mut self, group: &str, ops: &[Spanned<OpSpec>]) {
        let mut held: Vec<(String, bool, Range<usize>)> = Vec::new();
        self.check_lock_scope(group, ops, &mut held, &[], false);
        for (name, spin, span) in held {
            self.diags.push(self.loc.span(
                span,
                format!(
                    "group `{group}` takes {} `{name}` and never releases it in the same op list",
                    if spin { "spin lock" } else { "mutex" }
                ),
            ));
        }
    }

    /// `held`: locks taken in this op list; `outer`: locks held by enclosing
    /// op lists (a repeat or drain body runs with them held); `in_drain`:
    /// this list is (inside) a drain body, where barriers are refused.
    fn check_lock_scope(
        &mut self,
        group: &str,
        ops: &[Spanned<OpSpec>],
        held: &mut Vec<(String, bool, Range<usize>)>,
        outer: &[String],
        in_drain: bool,
    ) {
        for op in ops {
            let (name, spin, acquire) = match op.get_ref() {
                OpSpec::SpinLock(n) => (n, true, true),
                OpSpec::SpinUnlock(n) => (n, true, false),
                OpSpec::Lock(n) => (n, false, true),
                OpSpec::Unlock(n) => (n, false, false),
                OpSpec::Barrier(n) | OpSpec::Push(n) | OpSpec::Pop(n) => {
                    let barrier = matches!(op.get_ref(), OpSpec::Barrier(_));
                    self.check_wait(group, n, barrier, held, outer, in_drain);
                    continue;
                }
                OpSpec::Repeat(RepeatSpec { ops: body, .. })
                | OpSpec::Drain(DrainSpec { ops: body, .. }) => {
                    let (what, drain) = match op.get_ref() {
                        OpSpec::Drain(_) => ("drain", true),
                        _ => ("repeat", in_drain),
                    };
                    let mut inner = Vec::new();
                    let enclosing: Vec<String> = outer
                        .iter()
                        .cloned()
                        .chain(held.iter().map(|h| h.0.clone()))
                        .collect();
                    self.check_lock_scope(group, body, &mut inner, &enclosing, drain);
                    for (name, spin, span) in inner {
                        self.diags.push(self.loc.span(
                            span,
                            format!(
                                "{} `{name}` is taken inside a {what} body but not released in it",
                                if spin { "spin lock" } else { "mutex" }
                            ),
                        ));
                    }
                    continue;
                }
                _ => continue,
            };
            let pos = held
                .iter()
                .position(|(h, s, _)| h == name.get_ref() && *s == spin);
            let held_outside = outer.iter().any(|h| h == name.get_ref());
            match (acquire, pos) {
                (true, None) if !held_outside => {
                    held.push((name.get_ref().clone(), spin, name.span()))
                }
                (true, _) => self.diags.push(self.loc.span(
                    name.span(),
                    format!(
                        "group `{group}` takes `{}` again while holding it (self-deadlock)",
                        name.get_ref()
                    ),
                )),
                (false, Some(i)) => {
                    held.remove(i);
                }
                (false, None) => self.diags.push(self.loc.span(
                    name.span(),
                    format!(
                        "group `{group}` releases `{}` without holding it{}",
                        name.get_ref(),
                        if held_outside {
                            " in this op list (it was taken outside the loop)"
                        } else {
                            ""
                        }
                    ),
                )),
            }
        }
    }

    /// A barrier wait or queue op `n`: never at a barrier inside a drain, and
    /// never while holding a lock (`held` here or `outer` around).
    fn check_wait(
        &mut self,
        group: &str,
        n: &Spanned<String>,
        barrier: bool,
        held: &[(String, bool, Range<usize>)],
        outer: &[String],
        in_drain: bool,
    ) {
        if in_drain && barrier {
            self.diags.push(self.loc.span(
                n.span(),
                format!(
                    "group `{group}` waits at barrier `{}` inside a drain: how often each thread gets there depends on how many units it claims, so generations cannot be known to fill; move the barrier out of the drain",
                    n.get_ref()
                ),
            ));
        }
        // Waiting for other threads while holding a lock deadlocks as
        // soon as one of them needs that lock before it gets here.
        let holding = held.iter().map(|h| &h.0).chain(outer).next();
        if let Some(lock) = holding {
            let what = if barrier { "at barrier" } else { "on queue" };
            self.diags.push(self.loc.span(
                n.span(),
                format!(
                    "group `{group}` waits {what} `{}` while holding `{lock}`: a thread that needs `{lock}` before it gets there can never arrive; release `{lock}` first",
                    n.get_ref()
                ),
            ));
        }
    }
}
