// ds41/core/fp_exact.hpp — exact arithmetic whatever the consumer's compiler flags: explicit
// round-to-nearest operations for device code, and the host's contraction probe.
//
// The reference rounds every multiply and every add on its own. On the host, ds41's headers ask the
// compiler for that by scoped pragmas (fp_exact_begin.hpp / fp_exact_end.hpp); where a compiler does
// not honour them (Clang's -ffp-contract=fast, which fuses in its backend whatever the pragmas say)
// the probe below notices and Model's constructor refuses to run. On the device, pragmas do nothing
// and nvcc fuses a*b+c into an FMA by default (--fmad=true): the exact paths' device arithmetic is
// written with the helpers below, which are __fmul_rn / __fadd_rn / ... there (operations nvcc
// never fuses) and plain operators on the host (inside the pragma region).
#pragma once
#include "error.hpp"
#include "macros.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

// ---------------------------------------------------------------- rounded operations (host and device)
DS41_HD float mul_rn(float a, float b) {
#if DS41_DEVICE_CODE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DS41_HD float add_rn(float a, float b) {
#if DS41_DEVICE_CODE
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DS41_HD float sub_rn(float a, float b) {
#if DS41_DEVICE_CODE
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
DS41_HD double mul_rn(double a, double b) {
#if DS41_DEVICE_CODE
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
DS41_HD double add_rn(double a, double b) {
#if DS41_DEVICE_CODE
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
DS41_HD double sub_rn(double a, double b) {
#if DS41_DEVICE_CODE
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

// ---------------------------------------------------------------- the host's contraction probe
/// Whether host code compiled here fuses a*b+c into one FMA although the pragma region asks for
/// separate roundings. a·a = 1 + 2^-11 + 2^-24 exactly; rounded to float32 the 2^-24 (a tie) goes,
/// so a·a + c is 0 with two roundings and 2^-24 fused. volatile keeps the compiler from folding the
/// expression at compile time (constant folding never fuses, so it would hide the mode). The probe
/// is ds41 code like any other: it sits in the same pragma region, so under GCC it is compiled with
/// the region's fp-contract=off, and under Clang with -ffp-contract=fast it fuses exactly where the
/// rest of ds41 does (that flag is per translation unit, in the backend).
inline bool host_fp_contracts() {
  volatile float a = 1.0f + 0x1p-12f;
  volatile float c = -(1.0f + 0x1p-11f);
  volatile double ad = 1.0 + 0x1p-27;
  volatile double cd = -(1.0 + 0x1p-26);
  const float x = a, y = c;
  const double xd = ad, yd = cd;
  return x * x + y != 0.0f || xd * xd + yd != 0.0;
}

/// Throws ds41::Error when this translation unit's host code cannot give the reference's bits: the
/// compiler contracts despite the pragmas (Clang -ffp-contract=fast), or -ffast-math (-Ofast) lets
/// it reorder sums and drop NaN/inf/signed-zero rules, which no pragma here undoes.
inline void require_exact_host_fp(const char* where) {
#if defined(__FAST_MATH__)
  fail(where, ": ds41 was compiled with -ffast-math (or -Ofast): its exact numerics need IEEE "
       "semantics; compile the translation units that include ds41 without -ffast-math/-Ofast "
       "(docs/NUMERICS.md, \"Consumers: compiler flags\")");
#endif
  if (host_fp_contracts())
    fail(where, ": this translation unit's host code fuses a*b+c into FMA despite ds41's "
         "#pragma clang fp contract(off) (Clang honours no pragma under -ffp-contract=fast): compile "
         "the translation units that include ds41 with -ffp-contract=on or off, not fast "
         "(docs/NUMERICS.md, \"Consumers: compiler flags\")");
}

}  // namespace ds41
#include "fp_exact_end.hpp"
