//! Experiments, the pure side: change one thing at a time, run the same
//! load, compare with intervals, keep quality in view, and answer the
//! origin question (more GPUs, a different option, or a smaller model).
//!
//! The engine's experiment runner starts each variant's server, runs the
//! sweeps and the graded set, and hands the samples here:
//! [`bootstrap`] gives capacity intervals over repeats and requests,
//! [`settings`] says what a variant changed, [`quality`] grades answers,
//! [`decision`] ranks and answers, and [`result`] is the report's data.
//! Nothing here does I/O; the bootstrap is seeded.

pub mod bootstrap;
pub mod decision;
pub mod energy;
pub mod quality;
pub mod result;
pub mod settings;

pub use bootstrap::{
    capacity_intervals, pooled_curve, CapacityEstimate, Interval, RequestSample, RunSample,
    StepSample, DEFAULT_RESAMPLES,
};
pub use decision::{answer, compare_with_baseline, next_step, rank};
pub use energy::joules_per_token;
pub use quality::{
    accuracy, builtin_set, grade, quality_drop, Accuracy, GradedItem, BUILTIN_ARITH_50,
};
pub use result::{
    pool_turns, Binding, CurvePoint, ExperimentResult, PlanSummary, RankRow, RunRecord, TurnPoint,
    VariantResult, VariantStatus,
};
pub use settings::{
    card_contradicts_flags, changed_settings, parse_flags, Resolved, SettingChange,
};
