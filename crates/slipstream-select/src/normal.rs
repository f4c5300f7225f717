//! The standard normal distribution's quantile function (its inverse CDF), computed rather than
//! tabled, so any percentile a configuration names has its constant (001 §4.1: `c_S` in (1)).
//!
//! Wichura's Algorithm AS 241 (PPND16, Applied Statistics 37(3), 1988), relative error about
//! 1e-16: the same rational approximations as R's `qnorm` and CPython's
//! `statistics.NormalDist.inv_cdf`, so the JavaScript agent can port it operation for operation.

/// The `p`-quantile of the standard normal distribution: `x` with `P(Z <= x) = p`.
///
/// `p` outside (0, 1) gives `-inf` at 0, `+inf` at 1 and NaN beyond or for NaN.
pub fn quantile(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        let r = 0.180625 - q * q;
        return q * horner(&CENTRAL_NUM, r) / horner(&CENTRAL_DEN, r);
    }
    let r = (-(if q <= 0.0 { p } else { 1.0 - p }).ln()).sqrt();
    let x = if r <= 5.0 {
        let r = r - 1.6;
        horner(&TAIL_NUM, r) / horner(&TAIL_DEN, r)
    } else {
        let r = r - 5.0;
        horner(&FAR_NUM, r) / horner(&FAR_DEN, r)
    };
    if q < 0.0 {
        -x
    } else {
        x
    }
}

/// `c[0] x^7 + c[1] x^6 + ... + c[7]`, evaluated as AS 241 writes it.
fn horner(c: &[f64; 8], x: f64) -> f64 {
    c.iter().skip(1).fold(c[0], |acc, &k| acc * x + k)
}

/// AS 241, |q| <= 0.425, numerator; highest power first.
#[allow(clippy::excessive_precision)]
const CENTRAL_NUM: [f64; 8] = [
    2.5090809287301226727e3,
    3.3430575583588128105e4,
    6.7265770927008700853e4,
    4.5921953931549871457e4,
    1.3731693765509461125e4,
    1.9715909503065514427e3,
    1.3314166789178437745e2,
    3.3871328727963666080,
];
/// AS 241, |q| <= 0.425, denominator; highest power first.
#[allow(clippy::excessive_precision)]
const CENTRAL_DEN: [f64; 8] = [
    5.2264952788528545610e3,
    2.8729085735721942674e4,
    3.9307895800092710610e4,
    2.1213794301586595867e4,
    5.3941960214247511077e3,
    6.8718700749205790830e2,
    4.2313330701600911252e1,
    1.0,
];
/// AS 241, r <= 5, numerator; highest power first.
#[allow(clippy::excessive_precision)]
const TAIL_NUM: [f64; 8] = [
    7.74545014278341407640e-4,
    2.27238449892691845833e-2,
    2.41780725177450611770e-1,
    1.27045825245236838258,
    3.64784832476320460504,
    5.76949722146069140550,
    4.63033784615654529590,
    1.42343711074968357734,
];
/// AS 241, r <= 5, denominator; highest power first.
#[allow(clippy::excessive_precision)]
const TAIL_DEN: [f64; 8] = [
    1.05075007164441684324e-9,
    5.47593808499534494600e-4,
    1.51986665636164571966e-2,
    1.48103976427480074590e-1,
    6.89767334985100004550e-1,
    1.67638483018380384940,
    2.05319162663775882187,
    1.0,
];
/// AS 241, r > 5, numerator; highest power first.
#[allow(clippy::excessive_precision)]
const FAR_NUM: [f64; 8] = [
    2.01033439929228813265e-7,
    2.71155556874348757815e-5,
    1.24266094738807843860e-3,
    2.65321895265761230930e-2,
    2.96560571828504891230e-1,
    1.78482653991729133580,
    5.46378491116411436990,
    6.65790464350110377720,
];
/// AS 241, r > 5, denominator; highest power first.
#[allow(clippy::excessive_precision)]
const FAR_DEN: [f64; 8] = [
    2.04426310338993978564e-15,
    1.42151175831644588870e-7,
    1.84631831751005468180e-5,
    7.86869131145613259100e-4,
    1.48753612908506148525e-2,
    1.36929880922735805310e-1,
    5.99832206555887937690e-1,
    1.0,
];

#[cfg(test)]
mod tests {
    use super::quantile;

    /// Reference values from CPython's `statistics.NormalDist().inv_cdf` (also AS 241) and
    /// standard tables; each of the three branches is exercised.
    #[test]
    fn matches_reference_values() {
        let cases = [
            (0.5, 0.0),
            (0.55, 0.125_661_346_855_074_13),
            (0.975, 1.959_963_984_540_053_6),
            (0.999, 3.090_232_306_167_813),
            (0.1, -1.281_551_565_544_600_8),
            (0.9, 1.281_551_565_544_600_8),
            (0.02425, -1.972_961_051_311_884_5),
            (1e-10, -6.361_340_902_404_056),
        ];
        for (p, want) in cases {
            let got = quantile(p);
            assert!(
                (got - want).abs() <= 1e-14,
                "quantile({p}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn is_odd_and_monotone_and_bounded_at_the_ends() {
        let mut last = f64::NEG_INFINITY;
        for i in 1..1000 {
            let p = f64::from(i) / 1000.0;
            let x = quantile(p);
            assert!(x > last, "not increasing at {p}");
            assert!((x + quantile(1.0 - p)).abs() < 1e-12, "not odd at {p}");
            last = x;
        }
        assert_eq!(quantile(0.0), f64::NEG_INFINITY);
        assert_eq!(quantile(1.0), f64::INFINITY);
        assert!(quantile(1.5).is_nan());
        assert!(quantile(-0.1).is_nan());
    }
}
