//! Statistics of trials: the papers' "mean of the median 5 of 7" and friends.

/// Mean of the middle `n - 2` values after sorting (all of them when `n <= 2`):
/// with 7 trials, the mean of the median 5 (Hart 2005 §5.1). `None` for no values.
pub fn trimmed_mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let keep = if v.len() <= 2 { v.len() } else { v.len() - 2 };
    let skip = (v.len() - keep) / 2;
    let mid = &v[skip..skip + keep];
    Some(mid.iter().sum::<f64>() / mid.len() as f64)
}

/// The `p`-quantile (0..=1) by nearest rank; `None` for no values.
pub fn quantile<T: Copy + PartialOrd>(xs: &[T], p: f64) -> Option<T> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let i = ((v.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    Some(v[i])
}

/// Median.
pub fn median<T: Copy + PartialOrd>(xs: &[T]) -> Option<T> {
    quantile(xs, 0.5)
}

/// The least-squares line through the second half of a time series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// First sample of the half, `(t, y)`.
    pub first: (f64, f64),
    /// Last sample, `(t, y)`.
    pub last: (f64, f64),
    /// Mean of `y` over the half.
    pub mean: f64,
    /// Slope of `y` per unit of `t`.
    pub slope: f64,
    /// Standard error of `slope`, from the residuals (0 on a perfect line).
    pub slope_se: f64,
}

impl Trend {
    /// How much the line rises across the half, relative to the mean there
    /// (slope × span / mean; 0 for a mean of 0): 0.1 = up by a tenth of its level.
    pub fn growth(&self) -> f64 {
        self.relative(self.slope)
    }

    /// The standard error of [`growth`](Self::growth).
    pub fn growth_se(&self) -> f64 {
        self.relative(self.slope_se)
    }

    fn relative(&self, per_t: f64) -> f64 {
        if self.mean.abs() > 0.0 {
            per_t * (self.last.0 - self.first.0) / self.mean
        } else {
            0.0
        }
    }
}

/// The least-squares trend of the second half of `series` (`(t, y)` samples in
/// time order; the half starts at sample `len / 2`). `None` with fewer than 4
/// samples in that half or no spread in their `t`.
pub fn second_half_trend(series: &[(f64, f64)]) -> Option<Trend> {
    let half = &series[series.len() / 2..];
    let (&first, &last) = (half.first()?, half.last()?);
    if half.len() < 4 {
        return None;
    }
    let n = half.len() as f64;
    let mt = half.iter().map(|s| s.0).sum::<f64>() / n;
    let my = half.iter().map(|s| s.1).sum::<f64>() / n;
    let sxx: f64 = half.iter().map(|s| (s.0 - mt).powi(2)).sum();
    if sxx.is_nan() || sxx <= 0.0 {
        return None;
    }
    let slope = half.iter().map(|s| (s.0 - mt) * (s.1 - my)).sum::<f64>() / sxx;
    let ssr: f64 = half
        .iter()
        .map(|s| (s.1 - my - slope * (s.0 - mt)).powi(2))
        .sum();
    Some(Trend {
        first,
        last,
        mean: my,
        slope,
        slope_se: (ssr / (n - 2.0) / sxx).sqrt(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_of_median_five_of_seven() {
        let xs = [100.0, 1.0, 2.0, 3.0, 4.0, 5.0, -50.0];
        assert_eq!(trimmed_mean(&xs), Some(3.0));
        assert_eq!(trimmed_mean(&[4.0]), Some(4.0));
        assert_eq!(trimmed_mean(&[1.0, 3.0]), Some(2.0));
        assert_eq!(trimmed_mean(&[1.0, 2.0, 9.0]), Some(2.0));
        assert_eq!(trimmed_mean(&[]), None);
    }

    #[test]
    fn quantiles() {
        let xs = [5u64, 1, 3, 2, 4];
        assert_eq!(median(&xs), Some(3));
        assert_eq!(quantile(&xs, 0.0), Some(1));
        assert_eq!(quantile(&xs, 1.0), Some(5));
        assert_eq!(median::<u64>(&[]), None);
    }

    #[test]
    fn trend_of_the_second_half() {
        // y = 10 + 2t at t = 0..=9: the half is t = 5..=9, mean 24, rise 8.
        let line: Vec<(f64, f64)> = (0..10)
            .map(|t| (f64::from(t), 10.0 + 2.0 * f64::from(t)))
            .collect();
        let tr = second_half_trend(&line).unwrap();
        assert_eq!((tr.first, tr.last), ((5.0, 20.0), (9.0, 28.0)));
        assert!(
            (tr.slope - 2.0).abs() < 1e-12 && tr.slope_se < 1e-9,
            "{tr:?}"
        );
        assert!((tr.growth() - 8.0 / 24.0).abs() < 1e-12);
        // Alternating ±1 around 5: no slope worth the name, a large error.
        let zigzag: Vec<(f64, f64)> = (0..10)
            .map(|t| (f64::from(t), if t % 2 == 0 { 4.0 } else { 6.0 }))
            .collect();
        let tr = second_half_trend(&zigzag).unwrap();
        assert!(tr.growth().abs() < tr.growth_se() * 3.0, "{tr:?}");
        assert_eq!(second_half_trend(&line[..5]), None, "3 samples in the half");
        assert_eq!(second_half_trend(&[(1.0, 1.0); 10]), None, "no spread in t");
    }
}
