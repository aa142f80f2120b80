//! What a load level costs: energy per output token from the GPUs' power
//! over the step, and money per million output tokens from a configured
//! price. Pure arithmetic on a step's means.
//!
//! Energy: mean power (W, summed over the GPUs) ÷ output tokens per second
//! = joules per output token — the mean of a rate over the same window as
//! the throughput, so it needs no energy counter (dcgm's
//! `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` would give the same over a whole
//! step).
//!
//! Cost: a rented GPU's `$ per GPU-hour` × GPUs, or electricity's
//! `$ per kWh` × power, per second, ÷ output tokens per second × 10⁶. With
//! both prices set they add up (rent and the power bill of one's own
//! hardware).

use serde::{Deserialize, Serialize};

/// The configured prices (each optional).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Price {
    /// Dollars per GPU-hour (a cloud rate).
    pub per_gpu_hour: Option<f64>,
    /// Dollars per kWh of GPU energy.
    pub per_kwh: Option<f64>,
}

impl Price {
    pub fn is_set(&self) -> bool {
        self.per_gpu_hour.is_some() || self.per_kwh.is_some()
    }
}

/// Energy and cost of one step; `None` where an input is missing.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StepEconomics {
    /// Joules per output token.
    pub energy_j_per_output_token: Option<f64>,
    /// Dollars per million output tokens.
    pub cost_per_million_output_tokens: Option<f64>,
}

/// The economics of a step that produced `output_tps` output tokens per
/// second on `gpus` GPUs drawing `power_w` in all.
pub fn step_economics(
    power_w: Option<f64>,
    gpus: Option<u32>,
    output_tps: f64,
    price: &Price,
) -> StepEconomics {
    let positive = |v: Option<f64>| v.filter(|v| v.is_finite() && *v > 0.0);
    let Some(tps) = positive(Some(output_tps)) else {
        return StepEconomics::default();
    };
    let power_w = positive(power_w);
    let rent_per_s = match (positive(price.per_gpu_hour), gpus) {
        (Some(rate), Some(n)) if n > 0 => Some(rate * f64::from(n) / 3600.0),
        _ => None,
    };
    let energy_per_s = match (positive(price.per_kwh), power_w) {
        (Some(rate), Some(w)) => Some(rate * w / 1000.0 / 3600.0),
        _ => None,
    };
    // Every price that is set must be computable, or the sum would
    // understate the cost.
    let dollars_per_s = match (price.per_gpu_hour.is_some(), price.per_kwh.is_some()) {
        (false, false) => None,
        (true, false) => rent_per_s,
        (false, true) => energy_per_s,
        (true, true) => rent_per_s.zip(energy_per_s).map(|(r, e)| r + e),
    };
    StepEconomics {
        energy_j_per_output_token: power_w.map(|w| w / tps),
        cost_per_million_output_tokens: dollars_per_s.map(|d| d / tps * 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_and_cost_per_token() {
        // 700 W on 2 GPUs at 1 000 tok/s: 0.7 J/token.
        let gpu_hour = Price {
            per_gpu_hour: Some(3.6),
            per_kwh: None,
        };
        let e = step_economics(Some(700.0), Some(2), 1000.0, &gpu_hour);
        assert!((e.energy_j_per_output_token.unwrap() - 0.7).abs() < 1e-12);
        // $7.2/h for two GPUs = $0.002/s; 1 000 tok/s → $2 per million.
        assert!((e.cost_per_million_output_tokens.unwrap() - 2.0).abs() < 1e-9);
        let kwh = Price {
            per_gpu_hour: None,
            per_kwh: Some(0.36),
        };
        // 0.7 kW × $0.36/kWh = $0.252/h = $0.00007/s → $0.07 per million.
        let e = step_economics(Some(700.0), Some(2), 1000.0, &kwh);
        assert!((e.cost_per_million_output_tokens.unwrap() - 0.07).abs() < 1e-9);
        let both = Price {
            per_gpu_hour: Some(3.6),
            per_kwh: Some(0.36),
        };
        let e = step_economics(Some(700.0), Some(2), 1000.0, &both);
        assert!((e.cost_per_million_output_tokens.unwrap() - 2.07).abs() < 1e-9);
        // A kWh price without power readings gives no cost, not a low one.
        let e = step_economics(None, Some(2), 1000.0, &both);
        assert_eq!(e.cost_per_million_output_tokens, None);
        assert_eq!(e.energy_j_per_output_token, None);
        // No output, no per-token figures.
        let e = step_economics(Some(700.0), Some(2), 0.0, &gpu_hour);
        assert_eq!(e, StepEconomics::default());
    }
}
