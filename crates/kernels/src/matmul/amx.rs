//! Intel AMX: detection, the process's permission to use tile data, the tile configuration of
//! the panel kernels, and the five tile instructions they use. The instructions are written as
//! inline assembly because Rust's AMX intrinsics are not stable.
//!
//! A tile multiply (`tdpbssd`) sums products of signed bytes in exact 32-bit integers, so the
//! order in which the hardware adds them cannot change a result: the panel kernels get the same
//! integer block sums as every other kernel.

use std::arch::asm;
use std::cell::Cell;
use std::sync::OnceLock;

/// Whether this process may run AMX-INT8 tile instructions: the CPU has them, the OS saves tile
/// state (XCR0 bits 17 and 18) and Linux granted the tile-data permission
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, asked once). `TENSORFOLD_AMX=0` says no, for measuring;
/// so does a forced `TENSORFOLD_SIMD` below AVX-512. The answer only changes speed: the panel
/// kernels give the bits of the others.
pub fn available() -> bool {
    static A: OnceLock<bool> = OnceLock::new();
    *A.get_or_init(|| {
        let off = std::env::var("TENSORFOLD_AMX").is_ok_and(|v| v == "0");
        !off && hardware()
    })
}

/// Whether the CPU has AMX tiles the OS lets us use, whatever `TENSORFOLD_AMX` says.
pub fn hardware() -> bool {
    static H: OnceLock<bool> = OnceLock::new();
    *H.get_or_init(|| crate::detect() >= crate::SimdLevel::Avx512Vnni && detect())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    use std::arch::x86_64::__cpuid_count;
    let (max_leaf, l1) = (__cpuid_count(0, 0).eax, __cpuid_count(1, 0));
    if max_leaf < 7 || l1.ecx & (1 << 27) == 0 {
        return false; // no leaf 7, or no OSXSAVE (xgetbv would fault)
    }
    // SAFETY: as above.
    let l7 = __cpuid_count(7, 0);
    let (tile, int8) = (l7.edx & (1 << 24) != 0, l7.edx & (1 << 25) != 0);
    // SAFETY: OSXSAVE is set, so xgetbv is allowed.
    let xcr0 = unsafe { xgetbv0() };
    tile && int8 && xcr0 & (3 << 17) == 3 << 17 && request_tile_permission()
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[target_feature(enable = "xsave")]
unsafe fn xgetbv0() -> u64 {
    std::arch::x86_64::_xgetbv(0)
}

/// `arch_prctl(code, arg)` (system call 158 on x86_64 Linux).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn arch_prctl(code: u64, arg: u64) -> i64 {
    let ret: i64;
    asm!(
        "syscall",
        inlateout("rax") 158i64 => ret,
        in("rdi") code,
        in("rsi") arg,
        lateout("rcx") _,
        lateout("r11") _,
        options(nostack),
    );
    ret
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_permission() -> bool {
    const ARCH_GET_XCOMP_PERM: u64 = 0x1022;
    const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
    const XFEATURE_XTILEDATA: u64 = 18;
    let mut granted = 0u64;
    // SAFETY: the request changes only this process's permitted xsave features; the query
    // writes one u64 through the pointer it is given.
    unsafe {
        if arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0 {
            return false;
        }
        if arch_prctl(ARCH_GET_XCOMP_PERM, &mut granted as *mut u64 as u64) != 0 {
            return false;
        }
    }
    granted & (1 << XFEATURE_XTILEDATA) != 0
}

/// Palette 1 tile configuration (the 64-byte operand of `ldtilecfg`).
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

/// The panel kernels' tiles for `m` activation rows and units of `unit_k` values: tmm0-3 hold
/// integer sums (m rows of 16 columns), tmm4-5 activations (m rows of `unit_k` bytes), tmm6-7
/// weight codes (`unit_k / 4` rows of 16 columns times 4 bytes).
fn config(m: usize, unit_k: usize) -> TileConfig {
    let mut c = TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: [0; 16],
        rows: [0; 16],
    };
    for t in 0..4 {
        c.rows[t] = m as u8;
        c.colsb[t] = 64;
    }
    for t in 4..6 {
        c.rows[t] = m as u8;
        c.colsb[t] = unit_k as u16;
    }
    for t in 6..8 {
        c.rows[t] = (unit_k / 4) as u8;
        c.colsb[t] = 64;
    }
    c
}

thread_local! {
    /// The configuration this thread last loaded, as (rows, unit values); (0, 0) for none.
    static LOADED: Cell<(u8, u8)> = const { Cell::new((0, 0)) };
}

/// Makes the tiles of this thread those of [`config`]`(m, unit_k)` (loaded only when it
/// changes). `m` is 1..=16, `unit_k` 16 or 32.
///
/// # Safety
/// [`available`] must have returned true.
pub unsafe fn configure(m: usize, unit_k: usize) {
    debug_assert!((1..=16).contains(&m) && (unit_k == 16 || unit_k == 32));
    let key = (m as u8, unit_k as u8);
    if LOADED.with(|l| l.get()) != key {
        let c = config(m, unit_k);
        asm!("ldtilecfg [{}]", in(reg) &c as *const TileConfig, options(nostack, readonly));
        LOADED.with(|l| l.set(key));
    }
}

/// Issues one unit of a panel product: integer sums of `m` activation rows (`a`, rows
/// `a_stride` bytes apart) times 16 weight columns (`b`, tile layout: `unit_k / 4` rows of 64
/// bytes) into accumulator tile `C`, through activation tile `A` and code tile `B`.
macro_rules! issue {
    ($name:ident, $c:literal, $a:literal, $b:literal) => {
        /// # Safety
        /// Tiles configured by [`configure`]; `a` and `b` valid for the configured shapes.
        #[inline(always)]
        pub unsafe fn $name(a: *const i8, a_stride: usize, b: *const u8) {
            asm!(
                concat!("tileloadd tmm", $a, ", [{a} + {sa}*1]"),
                concat!("tileloadd tmm", $b, ", [{b} + {sb}*1]"),
                concat!("tilezero tmm", $c),
                concat!("tdpbssd tmm", $c, ", tmm", $a, ", tmm", $b),
                a = in(reg) a,
                sa = in(reg) a_stride,
                b = in(reg) b,
                sb = in(reg) 64usize,
                options(nostack),
            );
        }
    };
}
issue!(issue0, "0", "4", "6");
issue!(issue1, "1", "5", "7");
issue!(issue2, "2", "4", "6");
issue!(issue3, "3", "5", "7");

/// Stores accumulator tile `C` (`m` rows of 16 i32) to `c`.
macro_rules! store {
    ($name:ident, $c:literal) => {
        /// # Safety
        /// Tiles configured by [`configure`]; `c` valid for `m` rows of 64 bytes.
        #[inline(always)]
        pub unsafe fn $name(c: *mut i32) {
            asm!(
                concat!("tilestored [{c} + {sb}*1], tmm", $c),
                c = in(reg) c,
                sb = in(reg) 64usize,
                options(nostack),
            );
        }
    };
}
store!(store0, "0");
store!(store1, "1");
store!(store2, "2");
store!(store3, "3");

/// `units` units of a panel product, unit u reading `a + u * a_step` and `b + u * b_step`
/// and writing its sums to `c + u * c_step` (i32s). Each unit's store is issued after the
/// next unit's multiply. A tile store costs about as much as the load-multiply before it (17
/// of 35 cycles a unit at 1-16 rows on the 2-core AMX machine, measured apart), and the
/// stores are what bounds the tile kernels at verify sizes.
///
/// # Safety
/// Tiles configured by [`configure`]; every pointer valid for the configured shapes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn units(
    units: usize,
    a: *const i8,
    a_stride: usize,
    a_step: usize,
    b: *const u8,
    b_step: usize,
    c: *mut i32,
    c_step: usize,
) {
    let store = |u: usize| {
        let at = c.add(u * c_step);
        match u & 3 {
            0 => store0(at),
            1 => store1(at),
            2 => store2(at),
            _ => store3(at),
        }
    };
    for u in 0..units {
        let (au, bu) = (a.add(u * a_step), b.add(u * b_step));
        match u & 3 {
            0 => issue0(au, a_stride, bu),
            1 => issue1(au, a_stride, bu),
            2 => issue2(au, a_stride, bu),
            _ => issue3(au, a_stride, bu),
        }
        if u > 0 {
            store(u - 1);
        }
    }
    if units > 0 {
        store(units - 1);
    }
}
