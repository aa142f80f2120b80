pub mod loaded;
