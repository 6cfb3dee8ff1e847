/* kvm-anchor: holds two idle VMs open for the life of the nested host, so that
 * the KVM static keys a VM's creation and teardown flip never flip again while
 * the tests run.
 *
 * Why: each flip of a static key rewrites kernel text (text_poke_bp: an int3,
 * then IPIs to every CPU). Under QEMU's multi-threaded TCG the L1 host has
 * locked up in exactly that patching (docs/nested-host.md), and every test VM
 * flipped keys twice: the in-kernel LAPIC's `apic_sw_disabled` (raised when a
 * vCPU's LAPIC is created, dropped a second after the guest enables it) and
 * `kvm_has_noapic_vcpu` (raised and dropped with every vCPU of a VM without
 * an in-kernel irqchip, smplab-vmm's --irqchip user). A key held at one by
 * an anchor's vCPU changes only between one and more, which patches nothing.
 *
 * The anchors: VM A has an in-kernel irqchip and one vCPU that never runs (its
 * LAPIC stays software-disabled); VM B has no irqchip and one vCPU. After
 * creating them the program forks; the child keeps the descriptors and sleeps,
 * the parent exits 0 so /init goes on. Built by tools/nested-host/nested-host
 * with gcc -static; without gcc the nested host runs without anchors. */
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int vm_with_vcpu(int kvm, int irqchip) {
    int vm = ioctl(kvm, KVM_CREATE_VM, 0);
    if (vm < 0) {
        perror("kvm-anchor: KVM_CREATE_VM");
        return -1;
    }
    if (irqchip && ioctl(vm, KVM_CREATE_IRQCHIP, 0) < 0) {
        perror("kvm-anchor: KVM_CREATE_IRQCHIP");
        return -1;
    }
    if (ioctl(vm, KVM_CREATE_VCPU, 0) < 0) {
        perror("kvm-anchor: KVM_CREATE_VCPU");
        return -1;
    }
    return 0;
}

int main(void) {
    int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm < 0) {
        perror("kvm-anchor: /dev/kvm");
        return 1;
    }
    if (vm_with_vcpu(kvm, 1) < 0 || vm_with_vcpu(kvm, 0) < 0)
        return 1;
    pid_t child = fork();
    if (child < 0) {
        perror("kvm-anchor: fork");
        return 1;
    }
    if (child > 0)
        return 0;
    setsid();
    for (;;)
        pause();
}
