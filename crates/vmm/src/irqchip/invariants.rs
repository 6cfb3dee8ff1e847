//! The interrupt controllers' invariants, checked on a quiescent VM (after its
//! vCPUs stopped): the properties the single-vCPU fuzzers (`fuzz.rs`) assert
//! after every step, put as data so a concurrent run can check them once at
//! its end, for the VMM's models and, where KVM shows the state
//! (`KVM_GET_LAPIC`, `KVM_GET_IRQCHIP`), for the in-kernel irqchip.
//!
//! LAPIC (Intel SDM vol. 3A §11.8): no vector below 16 requested or in
//! service; at most one vector in service per priority class (INTA only takes
//! a vector whose class beats the PPR, which is at least the class of every
//! vector in service); PPR is the higher of TPR and the highest in-service
//! class; a software-disabled LAPIC has every LVT masked (§11.4.7.2); the ICR
//! never reads busy (delivery is instant); the model's timer never counts
//! above its initial count. IOAPIC (82093AA data sheet): remote IRR only on
//! a level-triggered entry whose interrupt some LAPIC still holds (requested
//! or in service); entries hold only writable bits. PIC (8259A data sheet):
//! vector bases 8-aligned, the initialization sequence in a known step, the
//! ELCR's fixed edge bits clear.

use super::regs::{highest_in, ppr};

/// One broken invariant: which controller, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IrqchipViolation {
    #[error("LAPIC of vCPU {vcpu}: vector {vector:#x} (below 16) in {register}")]
    IllegalVector {
        vcpu: u32,
        register: &'static str,
        vector: u8,
    },
    #[error(
        "LAPIC of vCPU {vcpu}: vectors {lower:#x} and {higher:#x} in service in one priority class"
    )]
    IsrClassTwice { vcpu: u32, lower: u8, higher: u8 },
    #[error(
        "LAPIC of vCPU {vcpu}: PPR reads {read:#x}, but TPR {tpr:#x} and the highest vector in \
         service {isr_highest:?} make it {expected:#x}"
    )]
    Ppr {
        vcpu: u32,
        read: u8,
        tpr: u8,
        isr_highest: Option<u8>,
        expected: u8,
    },
    #[error(
        "LAPIC of vCPU {vcpu}: vector {vector:#x} marked level-triggered in TMR but neither \
         requested nor in service"
    )]
    TmrOrphan { vcpu: u32, vector: u8 },
    #[error(
        "LAPIC of vCPU {vcpu}: software-disabled (SVR {svr:#x}) but LVT {index} {lvt:#x} unmasked"
    )]
    LvtUnmaskedWhileDisabled {
        vcpu: u32,
        svr: u32,
        index: usize,
        lvt: u32,
    },
    #[error("LAPIC of vCPU {vcpu}: ICR low word {icr_lo:#x} reads busy")]
    IcrBusy { vcpu: u32, icr_lo: u32 },
    #[error(
        "LAPIC of vCPU {vcpu}: timer current count {current} above the initial count {initial}"
    )]
    TimerCount {
        vcpu: u32,
        current: u32,
        initial: u32,
    },
    #[error("LAPIC of vCPU {vcpu}: timer {problem}")]
    Timer { vcpu: u32, problem: String },
    #[error(
        "LAPIC of vCPU {vcpu}: the routing mirror other threads read ({mirror:#x}) differs from \
         the registers ({registers:#x})"
    )]
    RoutingMirror {
        vcpu: u32,
        mirror: u32,
        registers: u32,
    },
    #[error("IOAPIC pin {pin}: remote IRR on the edge-triggered entry {entry:#x}")]
    RemoteIrrOnEdge { pin: usize, entry: u64 },
    #[error(
        "IOAPIC pin {pin}: remote IRR for vector {vector:#x}, which no LAPIC has requested or in \
         service (its EOI can never come)"
    )]
    RemoteIrrOrphan { pin: usize, vector: u8 },
    #[error("IOAPIC pin {pin}: entry {entry:#x} has bits no write can set ({stray:#x})")]
    MalformedEntry { pin: usize, entry: u64, stray: u64 },
    #[error("PIC {chip}: {problem}")]
    Pic { chip: &'static str, problem: String },
    #[error(
        "the in-kernel irqchip's state could not be read ({what}: {source}), so it was not checked"
    )]
    KvmStateUnreadable {
        what: String,
        source: kvm_ioctls::Error,
    },
}

impl IrqchipViolation {
    /// Whether a guest can bring this state about on its own, as on hardware,
    /// so that finding it is not a VMM bug: a remote IRR is orphaned when the
    /// guest resets (INIT) the LAPIC holding its vector, re-sends that
    /// vector edge-triggered before the EOI (TMR then clears and the EOI is
    /// not broadcast), or reprograms the entry's vector while it waits (the
    /// EOI then names another vector). The fuzz guest with interrupts off
    /// (no acknowledge, no INIT while fuzzing) must never show one.
    pub fn guest_can_cause(&self) -> bool {
        matches!(self, IrqchipViolation::RemoteIrrOrphan { .. })
    }
}

/// What a LAPIC shows through its registers, from either irqchip.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LapicView {
    pub vcpu: u32,
    pub irr: [u32; 8],
    pub isr: [u32; 8],
    pub tmr: [u32; 8],
    pub tpr: u8,
    pub ppr: u8,
    pub svr: u32,
    /// Timer, thermal, perf, LINT0, LINT1, error.
    pub lvt: [u32; 6],
    pub icr_lo: u32,
    pub timer_initial: u32,
    pub timer_current: u32,
}

/// Register offsets in the 1 KiB `KVM_GET_LAPIC` page (the xAPIC layout).
const KVM_REG_TPR: usize = 0x80;
const KVM_REG_PPR: usize = 0xa0;
const KVM_REG_SVR: usize = 0xf0;
const KVM_REG_ISR: usize = 0x100;
const KVM_REG_TMR: usize = 0x180;
const KVM_REG_IRR: usize = 0x200;
const KVM_REG_ICR_LO: usize = 0x300;
const KVM_REG_LVT: usize = 0x320;
const KVM_REG_TIMER_INIT: usize = 0x380;
const KVM_REG_TIMER_CUR: usize = 0x390;
const SVR_ENABLE: u32 = 1 << 8;
const LVT_MASKED: u32 = 1 << 16;
const ICR_BUSY: u32 = 1 << 12;

impl LapicView {
    /// The view of a `KVM_GET_LAPIC` register page (bytes at the xAPIC
    /// register offsets, little-endian).
    pub fn from_kvm_regs(vcpu: u32, regs: &[u8]) -> LapicView {
        let word = |offset: usize| -> u32 {
            regs.get(offset..offset + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
        };
        let words = |base: usize| -> [u32; 8] { std::array::from_fn(|i| word(base + 0x10 * i)) };
        LapicView {
            vcpu,
            irr: words(KVM_REG_IRR),
            isr: words(KVM_REG_ISR),
            tmr: words(KVM_REG_TMR),
            tpr: word(KVM_REG_TPR).to_le_bytes()[0],
            ppr: word(KVM_REG_PPR).to_le_bytes()[0],
            svr: word(KVM_REG_SVR),
            lvt: std::array::from_fn(|i| word(KVM_REG_LVT + 0x10 * i)),
            icr_lo: word(KVM_REG_ICR_LO),
            timer_initial: word(KVM_REG_TIMER_INIT),
            timer_current: word(KVM_REG_TIMER_CUR),
        }
    }

    /// The vectors set in eight words, lowest first.
    fn vectors(words: &[u32; 8]) -> impl Iterator<Item = u8> + '_ {
        (0..=255u8).filter(|v| words[usize::from(v >> 5)] & (1 << (v & 31)) != 0)
    }

    /// The invariants both irqchips keep. `lvt_exempt`: LVT entries not
    /// checked against the disabled state (KVM's reset leaves the BSP's LINT0
    /// in ExtINT mode unmasked while the LAPIC is disabled, its
    /// `KVM_X86_QUIRK_LINT0_REENABLED`).
    pub fn check(&self, lvt_exempt: &[usize], out: &mut Vec<IrqchipViolation>) {
        let vcpu = self.vcpu;
        let isr_highest = highest_in(&self.isr);
        let expected = ppr(self.tpr, isr_highest);
        if self.ppr != expected {
            out.push(IrqchipViolation::Ppr {
                vcpu,
                read: self.ppr,
                tpr: self.tpr,
                isr_highest,
                expected,
            });
        }
        let mut previous: Option<u8> = None;
        for vector in Self::vectors(&self.isr) {
            if let Some(lower) = previous.filter(|p| p >> 4 == vector >> 4) {
                out.push(IrqchipViolation::IsrClassTwice {
                    vcpu,
                    lower,
                    higher: vector,
                });
            }
            previous = Some(vector);
        }
        if self.svr & SVR_ENABLE == 0 {
            for (index, lvt) in self.lvt.iter().enumerate() {
                if lvt & LVT_MASKED == 0 && !lvt_exempt.contains(&index) {
                    out.push(IrqchipViolation::LvtUnmaskedWhileDisabled {
                        vcpu,
                        svr: self.svr,
                        index,
                        lvt: *lvt,
                    });
                }
            }
        }
        if self.icr_lo & ICR_BUSY != 0 {
            out.push(IrqchipViolation::IcrBusy {
                vcpu,
                icr_lo: self.icr_lo,
            });
        }
    }

    /// The invariants of the VMM's model beyond what KVM keeps: it refuses
    /// vectors below 16 (ESR "illegal vector"), clears TMR with the EOI, and
    /// counts the timer down from the initial count (KVM raises a periodic
    /// period below its `min_timer_period_us`, 200 µs, and counts down from
    /// the raised period: a current count above the initial one, seen in the
    /// concurrent fuzz on PVM).
    pub fn check_model(&self, out: &mut Vec<IrqchipViolation>) {
        let vcpu = self.vcpu;
        if self.timer_current > self.timer_initial {
            out.push(IrqchipViolation::TimerCount {
                vcpu,
                current: self.timer_current,
                initial: self.timer_initial,
            });
        }
        for (register, words) in [("IRR", &self.irr), ("ISR", &self.isr), ("TMR", &self.tmr)] {
            for vector in Self::vectors(words).take_while(|v| *v < 16) {
                out.push(IrqchipViolation::IllegalVector {
                    vcpu,
                    register,
                    vector,
                });
            }
        }
        for (word, tmr) in self.tmr.iter().enumerate() {
            let orphans = tmr & !(self.irr[word] | self.isr[word]);
            for bit in (0..32u8).filter(|b| orphans & (1 << b) != 0) {
                // word < 8 and bit < 32, so the vector fits in a byte.
                #[allow(clippy::cast_possible_truncation)]
                let vector = (word as u8) * 32 + bit;
                out.push(IrqchipViolation::TmrOrphan { vcpu, vector });
            }
        }
    }

    /// Whether `vector` is requested or in service here.
    pub fn holds(&self, vector: u8) -> bool {
        let (word, bit) = (usize::from(vector >> 5), 1u32 << (vector & 31));
        (self.irr[word] | self.isr[word]) & bit != 0
    }
}

/// Remote IRR of an IOAPIC redirection entry.
pub const REMOTE_IRR: u64 = 1 << 14;
/// Trigger mode (level) of an IOAPIC redirection entry.
pub const LEVEL: u64 = 1 << 15;

/// Remote IRR only on level-triggered entries, whichever irqchip.
pub fn check_remote_irr_level(entries: &[u64], out: &mut Vec<IrqchipViolation>) {
    for (pin, entry) in entries.iter().enumerate() {
        if entry & REMOTE_IRR != 0 && entry & LEVEL == 0 {
            out.push(IrqchipViolation::RemoteIrrOnEdge { pin, entry: *entry });
        }
    }
}

/// Every remote IRR waits for an interrupt some LAPIC holds: `remote_vectors`
/// are (pin, the vector delivered when its remote IRR was set).
pub fn check_remote_irr_held(
    remote_vectors: &[(usize, u8)],
    lapics: &[LapicView],
    out: &mut Vec<IrqchipViolation>,
) {
    for (pin, vector) in remote_vectors {
        if !lapics.iter().any(|l| l.holds(*vector)) {
            out.push(IrqchipViolation::RemoteIrrOrphan {
                pin: *pin,
                vector: *vector,
            });
        }
    }
}

/// What `KVM_GET_IRQCHIP` shows of one 8259 (`kvm_pic_state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvmPicView {
    pub irq_base: u8,
    pub init_state: u8,
    pub priority_add: u8,
    pub elcr: u8,
    pub elcr_mask: u8,
}

impl KvmPicView {
    /// KVM's 8259 (arch/x86/kvm/i8259.c): ICW2 keeps the top five bits, the
    /// initialization sequence is in step 0 to 3, the rotation below 8, the
    /// ELCR within its mask.
    pub fn check(&self, chip: &'static str, out: &mut Vec<IrqchipViolation>) {
        let mut problem = |p: String| {
            out.push(IrqchipViolation::Pic { chip, problem: p });
        };
        if self.irq_base & 7 != 0 {
            problem(format!("vector base {:#x} not 8-aligned", self.irq_base));
        }
        if self.init_state > 3 {
            problem(format!("initialization step {}", self.init_state));
        }
        if self.priority_add > 7 {
            problem(format!("rotation {}", self.priority_add));
        }
        if self.elcr & !self.elcr_mask != 0 {
            problem(format!(
                "ELCR {:#x} outside its mask {:#x}",
                self.elcr, self.elcr_mask
            ));
        }
    }
}

/// The in-kernel irqchip's invariants from `KVM_GET_LAPIC` per vCPU and
/// `KVM_GET_IRQCHIP`'s IOAPIC redirection entries and 8259s. What KVM does
/// not show (the vector a remote IRR waits for: the entry may have been
/// reprogrammed since) or keeps otherwise than the model (vectors below 16
/// are accepted, TMR outlives the EOI, the timer counts down from a raised
/// period) is not checked.
pub fn check_kvm(
    lapics: &[LapicView],
    ioapic_entries: &[u64],
    pics: &[KvmPicView; 2],
) -> Vec<IrqchipViolation> {
    let mut out = Vec::new();
    for lapic in lapics {
        let exempt: &[usize] = if lapic.vcpu == 0 { &[3] } else { &[] };
        lapic.check(exempt, &mut out);
    }
    check_remote_irr_level(ioapic_entries, &mut out);
    pics[0].check("master", &mut out);
    pics[1].check("slave", &mut out);
    out
}

/// Read the in-kernel irqchip's state after a run (`KVM_GET_LAPIC` of each
/// `(index, vCPU)`, `KVM_GET_IRQCHIP` of the IOAPIC and both 8259s) and
/// check it ([`check_kvm`]). Call it on a thread without a seccomp filter
/// (the thread that called `run_vm`), after the vCPU threads ended.
pub fn read_and_check_kvm<'a>(
    vm: &kvm_ioctls::VmFd,
    vcpus: impl Iterator<Item = (u32, &'a kvm_ioctls::VcpuFd)>,
) -> Vec<IrqchipViolation> {
    use kvm_bindings::{
        kvm_irqchip, KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE,
    };
    let unreadable =
        |what: String| move |source| IrqchipViolation::KvmStateUnreadable { what, source };
    let read = || -> Result<Vec<IrqchipViolation>, IrqchipViolation> {
        let mut lapics = Vec::new();
        for (index, fd) in vcpus {
            let state = fd
                .get_lapic()
                .map_err(unreadable(format!("KVM_GET_LAPIC of vCPU {index}")))?;
            let regs: Vec<u8> = state.regs.iter().map(|b| b.to_le_bytes()[0]).collect();
            lapics.push(LapicView::from_kvm_regs(index, &regs));
        }
        let chip = |chip_id: u32| -> Result<kvm_irqchip, IrqchipViolation> {
            let mut chip = kvm_irqchip {
                chip_id,
                ..kvm_irqchip::default()
            };
            vm.get_irqchip(&mut chip)
                .map_err(unreadable(format!("KVM_GET_IRQCHIP {chip_id}")))?;
            Ok(chip)
        };
        let ioapic = chip(KVM_IRQCHIP_IOAPIC)?;
        // SAFETY: KVM filled the union's `ioapic` member for this chip id, and
        // every member is plain integers, valid for any bit pattern.
        let entries: Vec<u64> =
            unsafe { ioapic.chip.ioapic.redirtbl.iter().map(|e| e.bits).collect() };
        let pic = |chip_id| -> Result<KvmPicView, IrqchipViolation> {
            let chip = chip(chip_id)?;
            // SAFETY: as above, for the `pic` member of a PIC chip id.
            let state = unsafe { chip.chip.pic };
            Ok(KvmPicView {
                irq_base: state.irq_base,
                init_state: state.init_state,
                priority_add: state.priority_add,
                elcr: state.elcr,
                elcr_mask: state.elcr_mask,
            })
        };
        let pics = [pic(KVM_IRQCHIP_PIC_MASTER)?, pic(KVM_IRQCHIP_PIC_SLAVE)?];
        Ok(check_kvm(&lapics, &entries, &pics))
    };
    read().unwrap_or_else(|unreadable| vec![unreadable])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> LapicView {
        LapicView {
            vcpu: 1,
            svr: 0x1ff,
            lvt: [LVT_MASKED; 6],
            ..LapicView::default()
        }
    }

    fn violations(view: &LapicView) -> Vec<IrqchipViolation> {
        let mut out = Vec::new();
        view.check(&[], &mut out);
        view.check_model(&mut out);
        out
    }

    #[test]
    fn a_consistent_lapic_passes() {
        let mut view = healthy();
        view.isr[1] = 1 << 1 | 1 << 17; // 0x21 and 0x31: two classes
        view.irr[1] = 1 << 1; // 0x21 requested again while in service: allowed
        view.tpr = 0x10;
        view.ppr = 0x30;
        view.timer_initial = 10;
        view.timer_current = 10;
        assert_eq!(violations(&view), vec![]);
    }

    #[test]
    fn each_broken_lapic_invariant_is_reported() {
        let mut view = healthy();
        view.isr[1] = 1 << 1 | 1 << 2; // 0x21, 0x22: one class twice
        view.ppr = 0x21; // should be 0x20
        view.irr[0] = 1 << 3; // vector 3
        view.tmr[2] = 1; // vector 0x40 neither requested nor in service
        view.svr = 0xff; // disabled ...
        view.lvt[4] = 0x400; // ... with LINT1 unmasked
        view.icr_lo = ICR_BUSY;
        view.timer_initial = 1;
        view.timer_current = 2;
        let found = violations(&view);
        let kinds: Vec<_> = found
            .iter()
            .map(|v| {
                format!("{v:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        for kind in [
            "Ppr",
            "IsrClassTwice",
            "IllegalVector",
            "TmrOrphan",
            "LvtUnmaskedWhileDisabled",
            "IcrBusy",
            "TimerCount",
        ] {
            assert!(kinds.iter().any(|k| k == kind), "{kind} not in {found:?}");
        }
        assert!(found.iter().all(|v| !v.guest_can_cause()));
    }

    #[test]
    fn the_exempt_lvt_is_not_reported() {
        let mut view = healthy();
        view.svr = 0xff;
        view.lvt[3] = 0x700; // ExtINT, unmasked: KVM's BSP after reset
        let mut out = Vec::new();
        view.check(&[3], &mut out);
        assert_eq!(out, vec![]);
        view.check(&[], &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn kvm_register_pages_are_read_at_the_xapic_offsets() {
        let mut regs = vec![0u8; 1024];
        let mut put = |offset: usize, value: u32| {
            regs[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
        };
        put(0x80, 0x20);
        put(0xa0, 0x30);
        put(0x110, 1 << 17); // ISR word 1: vector 0x31
        put(0x200 + 0x70, 1 << 31); // IRR word 7: vector 0xff
        put(0xf0, 0x1ff);
        put(0x350, 0x1_0700);
        put(0x380, 5);
        put(0x390, 4);
        let view = LapicView::from_kvm_regs(2, &regs);
        assert_eq!((view.tpr, view.ppr, view.svr), (0x20, 0x30, 0x1ff));
        assert_eq!((view.isr[1], view.irr[7]), (1 << 17, 1 << 31));
        assert_eq!(
            (view.lvt[3], view.timer_initial, view.timer_current),
            (0x1_0700, 5, 4)
        );
        assert!(view.holds(0x31) && view.holds(0xff) && !view.holds(0x30));
        let mut out = Vec::new();
        view.check(&[], &mut out);
        assert_eq!(out, vec![]);
    }

    #[test]
    fn ioapic_and_kvm_pic_checks_report() {
        let mut out = Vec::new();
        check_remote_irr_level(&[REMOTE_IRR | LEVEL | 0x30, REMOTE_IRR | 0x31], &mut out);
        assert_eq!(
            out,
            vec![IrqchipViolation::RemoteIrrOnEdge {
                pin: 1,
                entry: REMOTE_IRR | 0x31
            }]
        );
        out.clear();
        let mut holder = healthy();
        holder.irr[1] = 1 << 16; // 0x30
        check_remote_irr_held(&[(0, 0x30), (5, 0x41)], &[holder], &mut out);
        assert_eq!(
            out,
            vec![IrqchipViolation::RemoteIrrOrphan {
                pin: 5,
                vector: 0x41
            }]
        );
        assert!(out[0].guest_can_cause());
        out.clear();
        let good = KvmPicView {
            irq_base: 0x20,
            elcr_mask: 0xf8,
            elcr: 0x08,
            ..KvmPicView::default()
        };
        good.check("master", &mut out);
        assert_eq!(out, vec![]);
        let bad = KvmPicView {
            irq_base: 0x21,
            init_state: 4,
            priority_add: 8,
            elcr: 0x01,
            elcr_mask: 0xf8,
        };
        bad.check("master", &mut out);
        assert_eq!(out.len(), 4, "{out:?}");
    }
}
